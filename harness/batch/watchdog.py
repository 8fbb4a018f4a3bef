"""The batch worker's watchdog: stops a session that outlived its wall clock by the grace period,
whatever it is stuck in, and says so where a rerun finds it."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from sandbox.errors import SandboxError
from sandbox.layout import SessionFolder


class Watchdog:
    """Stops a session that outlived its wall clock (`limits.timeout_min`) by the grace period,
    whatever it is stuck in: it records why (killed.json in the session folder, which a rerun
    reads instead of running the task again), removes the session's containers (which ends a call
    blocked on one), and if the run still has not returned after `exit_after_s`, ends this worker
    process; the cluster starts a fresh one and the scheduler hands the task-run to a worker, which
    finds the record of the kill. Other sessions never wait for a hung one."""

    def __init__(
        self,
        folder: SessionFolder,
        *,
        grace_s: float,
        after_s: float,
        docker_host: str | None,
        exit_after_s: float = 10.0,
    ) -> None:
        self.folder, self.grace_s, self.docker_host = folder, grace_s, docker_host
        self.after_s, self.exit_after_s = after_s, exit_after_s
        self.fired = False
        self.reason = ""
        self._done = threading.Event()
        self._timer = threading.Timer(after_s, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def cancel(self) -> None:
        self._done.set()
        self._timer.cancel()

    def _fire(self) -> None:
        from sandbox.durable import write_json

        self.fired = True
        self.reason = (
            f"stopped by the batch worker {self.after_s:.0f} s after it started: its wall clock "
            f"plus {self.grace_s:g} s of grace had passed"
        )
        folder = self.folder
        if folder.root.is_dir():
            write_json(folder.killed, {"reason": self.reason, "at": time.time()})
        threading.Thread(target=self._remove_containers, daemon=True).start()
        if not self._done.wait(self.exit_after_s):
            os._exit(75)  # the run is stuck past the containers' removal: this process goes, the cluster replaces it

    def _remove_containers(self) -> None:
        from harness.assembly import engine
        from sandbox import labels

        try:
            engine.prune_containers(self.docker_host, everything=True, extra={labels.SESSION: self.folder.root.name})
        except SandboxError:
            pass  # an engine that does not answer: the process exit below ends the session anyway


def killed_reason(path: Path) -> str | None:
    """Why a worker stopped this session (killed.json), or None."""
    from sandbox.durable import read_json

    if not path.is_file():
        return None
    try:
        return str(read_json(path).get("reason") or "stopped by the batch worker")
    except (OSError, ValueError, AttributeError, SandboxError):
        return "stopped by the batch worker"
