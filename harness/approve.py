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

from harness.gate import Decision, GateRequest
from sandbox.session.steplog import write_text_atomic


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
