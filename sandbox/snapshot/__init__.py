"""The snapshot store: a git-format object store written without ever running git on the workspace.

`objects` (loose objects, trees), `packs` (one pack for a snapshot that adds many objects),
`store` (snapshot and restore of a workspace, with a stat index; its settings in `config`), `diff` (diffs and patches
between trees), `watch` (inotify change detection, so a snapshot re-reads only what changed).
"""
