"""Approval backends for the gate's `ask` decisions.

`InteractiveApprover` asks a person at the terminal. `UnattendedApprover` has no terminal: it writes
the request into an approvals directory where a person (or a script) may drop an answer, and when no
answer arrives within the timeout the request is DENIED; the request, the answer (if any) and the
final decision are all recorded in that directory.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Protocol, TextIO

from pydantic import BaseModel, ConfigDict, Field
from rich.console import Console
from rich.prompt import Confirm

from harness.errors import SessionError, UsageError
from harness.policy.gate import Decision, GateRequest
from sandbox.durable import write_text_atomic


class Approver(Protocol):
    """Turns an `ask` decision into allow or deny."""

    def decide(
        self, request: GateRequest, decision: Decision, call_id: str, *, within_s: float | None = None
    ) -> Decision:
        """The final decision for this call (action is never `ask`). `within_s`: the run's wall clock
        left, which an unattended wait never outlasts (a person at the terminal is not hurried)."""
        ...


def describe(request: GateRequest) -> str:
    """One line a person can judge: the tool and what it touches."""
    what = request.command if request.command is not None else ", ".join(request.paths) or "(no arguments)"
    return f"{request.tool} [{request.tier}]: {what}"


class InteractiveApprover:
    """Asks at the terminal (rich prompt); streams are injectable for tests."""

    def __init__(self, console: Console | None = None, stream: TextIO | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.stream = stream

    def decide(
        self, request: GateRequest, decision: Decision, call_id: str, *, within_s: float | None = None
    ) -> Decision:
        self.console.print(f"[bold yellow]approval needed[/] ({decision.rule}: {decision.reason})")
        self.console.print(f"  {describe(request)}", markup=False)
        allowed = Confirm.ask("Allow this call?", default=False, console=self.console, stream=self.stream)
        action = "allow" if allowed else "deny"
        return Decision(
            action=action,
            rule=f"{decision.rule}/interactive",
            reason=f"{'approved' if allowed else 'refused'} at the terminal",
        )


class UnattendedConfig(BaseModel):
    """How unattended approval waits for an answer."""

    model_config = ConfigDict(extra="forbid")

    approvals_dir: Path
    """Where requests are written (`<id>.request.json`) and answers read (`<id>.answer`: allow|deny)."""
    timeout_s: float = Field(30.0, ge=0)
    """How long to wait for an answer before denying."""
    poll_s: float = Field(0.2, gt=0)
    """How often to look for an answer file."""


class UnattendedApprover:
    """No human at a terminal: wait for an answer file, deny when none arrives in time; record both."""

    def __init__(self, config: UnattendedConfig) -> None:
        self.config = config
        config.approvals_dir.mkdir(parents=True, exist_ok=True)

    def decide(
        self, request: GateRequest, decision: Decision, call_id: str, *, within_s: float | None = None
    ) -> Decision:
        timeout_s = self.config.timeout_s if within_s is None else max(0.0, min(self.config.timeout_s, within_s))
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", call_id) or "call"
        base = self.config.approvals_dir / name
        _write_json(
            base.with_suffix(".request.json"),
            {
                "call_id": call_id,
                "request": request.model_dump(mode="json"),
                "asked": decision.model_dump(),
                "summary": describe(request),
                "answer_file": base.with_suffix(".answer").name,
                "timeout_s": timeout_s,
            },
        )
        answer = self._wait(base.with_suffix(".answer"), timeout_s)
        if answer is None:
            final = Decision(
                action="deny",
                rule=f"{decision.rule}/unattended-timeout",
                reason=f"no approval within {timeout_s:.3g}s (unattended: denied)",
            )
        else:
            final = Decision(
                action="allow" if answer == "allow" else "deny",
                rule=f"{decision.rule}/unattended",
                reason=f"answered {answer!r} in the approvals directory",
            )
        _write_json(base.with_suffix(".decision.json"), final.model_dump())
        return final

    def _wait(self, path: Path, timeout_s: float) -> str | None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                text = path.read_text(encoding="utf-8", errors="replace").strip().lower()
            except FileNotFoundError:
                text = ""
            if text:
                return "allow" if text in {"allow", "yes", "y"} else "deny"
            if time.monotonic() >= deadline:
                return None
            time.sleep(min(self.config.poll_s, max(0.0, deadline - time.monotonic())))


def _write_json(path: Path, data: object) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True))


class PendingApproval(BaseModel):
    """A request an unattended run is waiting on (`harness approvals list`)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    """`<session>:<call>`: what `harness approvals allow|deny` takes."""
    session_id: str
    summary: str
    rule: str
    reason: str
    age_s: float
    timeout_s: float


def pending_approvals(state_dir: Path) -> list[PendingApproval]:
    """Requests of every session in state_dir that have neither a decision nor an answer yet."""
    found = []
    now = time.time()
    for request in sorted(Path(state_dir).glob("*/approvals/*.request.json")):
        base = request.with_name(request.name.removesuffix(".request.json"))
        if base.with_suffix(".decision.json").exists() or base.with_suffix(".answer").exists():
            continue
        try:
            data = json.loads(request.read_text(encoding="utf-8", errors="replace"))
        except ValueError:
            continue
        session = request.parent.parent.name
        asked = data.get("asked") or {}
        found.append(
            PendingApproval(
                id=f"{session}:{base.name}",
                session_id=session,
                summary=str(data.get("summary")),
                rule=str(asked.get("rule", "")),
                reason=str(asked.get("reason", "")),
                age_s=round(now - request.stat().st_mtime, 1),
                timeout_s=float(data.get("timeout_s") or 0),
            )
        )
    return found


def answer_approval(state_dir: Path, approval_id: str, action: str) -> Path:
    """Write the answer (allow or deny) the waiting run reads; SessionError for an unknown id."""
    if action not in ("allow", "deny"):
        raise UsageError(f"an answer is allow or deny, not {action!r}")
    session, _, name = approval_id.partition(":")
    folder = Path(state_dir) / session / "approvals"
    request = folder / f"{name}.request.json"
    if not session or not name or "/" in approval_id or not request.is_file():
        raise SessionError(f"no approval request {approval_id!r} in {state_dir} (see: harness approvals list)")
    if (folder / f"{name}.decision.json").exists():
        raise SessionError(f"approval {approval_id} was already decided (or timed out)")
    answer = folder / f"{name}.answer"
    write_text_atomic(answer, action + "\n")
    return answer
