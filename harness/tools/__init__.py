"""The tool menu: registry, built-in tools, and the in-container runner."""
