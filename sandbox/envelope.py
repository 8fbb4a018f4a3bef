"""The result of one sandboxed call: exit code first, then status, output, limits in force."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from sandbox.output import CappedOutput

Status = Literal["ok", "exit_nonzero", "timeout", "oom_killed", "output_limit"]
CallPath = Literal["stub", "exec", "host"]


class Posture(BaseModel):
    """The isolation and limits the call actually ran under (recorded in every envelope)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    runtime: str
    network: str
    read_only_root: bool
    user: str
    cpus: float
    memory: int
    pids: int
    timeout_s: float
    tmpfs: int
    cap_drop: str = "ALL"
    no_new_privileges: bool = True
    seccomp: str = "default"
    unenforced: list[str] = []
    """Limits above that this runtime, as registered with the engine, does not enforce (gVisor with
    `--ignore-cgroups`: memory, cpus, pids). The wall clock and output caps are enforced from the host."""


class CallOutcome(BaseModel):
    """What a backend saw of one command: exit code, status, time and the captured output."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    exit_code: int
    status: Status
    duration_ms: int
    stdout: str
    stderr: str
    stdout_bytes: int = 0
    """Total stdout bytes the command wrote (kept + dropped)."""
    stderr_bytes: int = 0
    stdout_dropped: int = 0
    """Bytes of stdout dropped from the middle (head and tail are kept)."""
    stderr_dropped: int = 0
    truncated: bool = False
    call_path: CallPath = "exec"
    """How the command reached its container: `stub` (the pre-started container's first process,
    over its attached stream), `exec` (`docker exec`, where no stub can run), `host` (FakeSandbox)."""

    @classmethod
    def captured(
        cls,
        exit_code: int,
        status: Status,
        duration_ms: int,
        out: CappedOutput,
        err: CappedOutput,
        call_path: CallPath = "exec",
    ) -> CallOutcome:
        """The outcome of a call whose output went through two head+tail captures."""
        return cls(
            exit_code=exit_code,
            status=status,
            duration_ms=duration_ms,
            stdout=out.text(),
            stderr=err.text(),
            stdout_bytes=out.total,
            stderr_bytes=err.total,
            stdout_dropped=out.dropped,
            stderr_dropped=err.dropped,
            truncated=out.truncated or err.truncated,
            call_path=call_path,
        )


class Envelope(CallOutcome):
    """What a command did (its CallOutcome) and the posture it ran under. Non-zero exits, timeouts,
    OOM kills and output floods are all data here.

    exit_code conventions: the command's own code; 124 when the wall clock killed it; 137 when the
    OOM killer did (or SIGKILL otherwise).
    """

    model_config = ConfigDict(extra="forbid", frozen=False)

    limits: Posture
    image_id: str
    runtime: str
    committed_image: str | None = None
    """New image id when the call changed the container filesystem and a commit was asked for."""

    @classmethod
    def of(
        cls, outcome: CallOutcome, *, limits: Posture, image_id: str, runtime: str, committed_image: str | None = None
    ) -> Envelope:
        """The envelope of a call: what the command did, and the posture it ran under."""
        return cls(
            **outcome.model_dump(), limits=limits, image_id=image_id, runtime=runtime, committed_image=committed_image
        )

    def headline(self) -> str:
        """First line for models and people: exit code and status first."""
        extra = {
            "timeout": f" (killed after {self.limits.timeout_s:g}s wall-clock limit)",
            "oom_killed": f" (killed: memory limit {self.limits.memory // 1024**2} MiB)",
            "output_limit": " (killed: output ceiling reached)",
        }.get(self.status, "")
        trunc = " [output truncated]" if self.truncated else ""
        return f"exit_code={self.exit_code} status={self.status}{extra} duration={self.duration_ms}ms{trunc}"

    def render(self) -> str:
        """Text for a model: headline, then stdout and stderr sections when non-empty."""
        parts = [self.headline()]
        if self.stdout:
            parts.append("--- stdout ---\n" + self.stdout.rstrip("\n"))
        if self.stderr:
            parts.append("--- stderr ---\n" + self.stderr.rstrip("\n"))
        return "\n".join(parts)
