"""Sessions: a private workspace copied from the repository, its snapshot steps, and its setup step.

`session` (create, open, commit, rollback, diff, export), `setup` (step 0: setup commands run once
and cached as an image), `workspace` (the one-time copy of the repository), `quota` (a workspace of
a bounded size), `records` (what a session folder records). Sessions sit on top: they use `sandbox.snapshot`, and setup uses
`sandbox.docker`.
"""
