"""Read-only paths hold for every tool, commands included.

Literal read-only directories and files are mounted read-only into every container (see
harness.tools.calls.context_mounts). What a mount cannot cover (glob patterns such as
`tests/**/test_*.py`, a read-only path that did not exist when the session started) is checked
after each step that wrote: a change there is put back as it was at the last step, and the model is
told the change was denied.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import pathspec

from harness.agent.protect import matches
from sandbox.snapshot.edit import generated

DENIED = (
    "[harness] DENIED: this step changed read-only paths, and they were put back as they were: {paths}. "
    "Tests and the files that configure them are read-only for every tool, commands included; "
    "change the code instead."
)


class GuardedTrees(Protocol):
    """What the guard needs of a session (sandbox.session.Session)."""

    @property
    def last_tree(self) -> str: ...

    def tree_now(self) -> str: ...

    def restore_tree(self, tree: str) -> None: ...

    def changed_paths(self, a: str, b: str) -> list[str]: ...

    def graft(self, tree: str, source: str, paths: list[str]) -> str: ...


class ReadOnlyGuard:
    """Puts read-only paths a step changed back as they were at the last committed step."""

    def __init__(self, trees: GuardedTrees, read_only: Sequence[str]) -> None:
        self.trees = trees
        self.spec = pathspec.PathSpec.from_lines("gitignore", list(read_only))

    def check(self) -> list[str]:
        """The read-only paths this step changed (already put back); empty when it changed none."""
        before, now = self.trees.last_tree, self.trees.tree_now()
        if before == now:
            return []
        changed = [
            path.rstrip("/")
            for path in self.trees.changed_paths(before, now)
            if not generated(path) and matches(self.spec, path)
        ]
        if changed:
            self.trees.restore_tree(self.trees.graft(now, before, changed))
        return changed
