"""Benchmarks from a repository's own history: read it (dulwich, nothing the repository configures
runs), mine tasks from its commits, write them, and check them in the real sandbox."""
