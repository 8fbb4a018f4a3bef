"""The file names of a session folder: the one place they are spelled.

`<state_dir>/<session id>/` holds what the sandbox side writes (`session.json`, `steps.jsonl`,
`workspace/`, `store/`, `lock`) and what the controller writes beside it (`run.json`,
`trajectory.jsonl`, `state.json`, `approvals/`, `change.patch`, `view.html`). Both sides, the CLI and the
leftover finder name these paths through `SessionFolder`, never by hand.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class SessionFolder:
    """The paths inside one session folder."""

    root: Path

    @property
    def info(self) -> Path:
        """session.json: what does not change after create; written last, so its absence means an
        unfinished create."""
        return self.root / "session.json"

    @property
    def steps(self) -> Path:
        """steps.jsonl: the append-only snapshot step log."""
        return self.root / "steps.jsonl"

    @property
    def workspace(self) -> Path:
        """What containers see (a copy of the repository)."""
        return self.root / "workspace"

    @property
    def store(self) -> Path:
        """The snapshot object store and its stat index."""
        return self.root / "store"

    @property
    def lock(self) -> Path:
        """Held while a step is committed or rolled back."""
        return self.root / "lock"

    @property
    def run_config(self) -> Path:
        """run.json: the resolved run configuration (what resume and replay start from)."""
        return self.root / "run.json"

    @property
    def trajectory(self) -> Path:
        """trajectory.jsonl: the write-ahead record of every request, turn, call and outcome."""
        return self.root / "trajectory.jsonl"

    @property
    def state(self) -> Path:
        """state.json: the run's last commit point, replaced atomically at each step boundary."""
        return self.root / "state.json"

    @property
    def approvals(self) -> Path:
        """Pending and answered approval requests of an unattended run."""
        return self.root / "approvals"

    @property
    def patch(self) -> Path:
        """change.patch: the final change, written when a run ends."""
        return self.root / "change.patch"

    @property
    def killed(self) -> Path:
        """killed.json: a batch worker stopped this session past its wall clock and grace (why, when)."""
        return self.root / "killed.json"

    @property
    def network(self) -> Path:
        """network.jsonl: every request through the session's egress proxy (host, port, method,
        bytes each way, allowed or refused and why), appended by the proxy."""
        return self.root / "network.jsonl"

    @property
    def running(self) -> Path:
        """run.lock: locked (flock) by the controller while a run of the session is going on; a
        killed controller's lock goes with it."""
        return self.root / "run.lock"

    @property
    def menu(self) -> Path:
        """menu.json: the tool schemas the run's model was offered (MCP servers' tools included),
        written when the agent starts (what `harness tools list --session` shows)."""
        return self.root / "menu.json"

    @property
    def creating(self) -> Path:
        """creating.json: the process making the session (its pid and identity, sandbox.process), there
        until its session.json is written: a folder with it and no session.json whose maker is gone is
        a create a crash cut short."""
        return self.root / "creating.json"

    @property
    def view(self) -> Path:
        """view.html: the trajectory page `harness view` writes (nothing reads it back)."""
        return self.root / "view.html"


OBJECTS = ".objects"
"""The state directory's shared object store (`sandbox.snapshot.shared`)."""


def objects_dir(state_dir: Path) -> Path:
    """Where the sessions of state_dir keep their snapshots' objects, shared."""
    return Path(state_dir) / OBJECTS


def session_folder(state_dir: Path, session_id: str) -> SessionFolder:
    """The folder of session_id in state_dir (which may not exist yet)."""
    return SessionFolder(Path(state_dir) / session_id)
