"""Lifecycle hooks in Claude Code's shape, failing closed where they gate.

A hook is a program of the user's (`[[hooks.EVENT]]` in the config file, never a repository's) run
on this machine, one at a time in the order given, with the event's JSON on stdin and a time limit.
Its answer is Claude Code's: exit 0 with nothing or a JSON object on stdout; exit 2 blocks, stderr
being the reason the model is given. Where Claude Code lets a failing hook through, harness does not
for the events that gate (PreToolUse, Stop): any other exit code, a timeout, a command that cannot
start, or stdout that is not a JSON object blocks, and the model and the trajectory say which hook
and why. The observers (SessionStart, PostToolUse, SessionEnd) fail open with a warning recorded.

A hook's environment is a short whitelist (PATH, HOME, the locale, TMPDIR, and the session's own
values), never the controller's: no API key reaches a hook.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.config import HookEntry, HooksConfig
from harness.trajectory import HookRecord

GATING = ("PreToolUse", "Stop")
"""Events whose hooks can refuse: they fail closed."""
PASSED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TZ")
"""The only variables of the controller's environment a hook sees."""
CLAUDE_NAMES = {
    "Bash": "run_command",
    "Read": "read_file",
    "Write": "write_file",
    "Edit": "apply_patch",
    "MultiEdit": "apply_patch",
    "Grep": "search_code",
    "Glob": "list_dir",
    "LS": "list_dir",
}
"""Claude Code's tool names a matcher may use for harness's tools, so a Claude Code settings entry
(`"matcher": "Bash"`) works as it is; the payload names harness's tool."""
_OUTPUT_LIMIT = 64 * 1024
HOOK_NOTE = "\n\nNOTE from a hook:\n"
"""What precedes the context hooks add to a tool's result (replay compares the result without it)."""


@dataclass
class HookOutcome:
    """What an event's hooks decided together: blocked (and why, by which), the input to use
    instead, the context to give the model, and every hook's record."""

    blocked: bool = False
    reason: str = ""
    hook: str = ""
    updated_input: dict[str, Any] | None = None
    context: list[str] = field(default_factory=list)
    records: list[HookRecord] = field(default_factory=list)


class Hooks:
    """Runs the configured hooks of one session."""

    def __init__(self, config: HooksConfig, *, session_id: str, workspace: Path, transcript: Path) -> None:
        self.config = config
        self.session_id = session_id
        self.workspace = workspace
        self.transcript = transcript

    def __bool__(self) -> bool:
        return any(getattr(self.config, event) for event in HooksConfig.model_fields)

    def wanted(self, event: str, tool_name: str | None = None) -> list[HookEntry]:
        """The hooks of event that apply (a tool event's by its matcher)."""
        entries: list[HookEntry] = getattr(self.config, event)
        if tool_name is None:
            return list(entries)
        aliases = [tool_name, *(claude for claude, ours in CLAUDE_NAMES.items() if ours == tool_name)]
        return [e for e in entries if e.matcher in ("", "*") or any(re.fullmatch(e.matcher, n) for n in aliases)]

    def run(self, event: str, payload: Mapping[str, Any], *, step: int = 0) -> HookOutcome:
        """Run event's hooks in order with payload (the common fields are added); the first that
        blocks ends the event (a later hook never overrides a refusal)."""
        tool_name = payload.get("tool_name")
        outcome = HookOutcome()
        data = {
            "session_id": self.session_id,
            "transcript_path": str(self.transcript),
            "cwd": str(self.workspace),
            "hook_event_name": event,
            "step": step,
            **payload,
        }
        for entry in self.wanted(event, tool_name if isinstance(tool_name, str) else None):
            if outcome.updated_input is not None:
                data["tool_input"] = outcome.updated_input  # the next hook sees the input it will get
            record = self._one(entry, event, data)
            record = record.model_copy(
                update={"step": step, "call_id": payload.get("tool_use_id"), "tool_name": tool_name}
            )
            outcome.records.append(record)
            if record.context:
                outcome.context.append(record.context)
            if record.verdict == "block":
                outcome.blocked, outcome.reason, outcome.hook = True, record.reason, entry.command
                break
            if record.updated_input is not None:
                outcome.updated_input = record.updated_input
        return outcome

    def _one(self, entry: HookEntry, event: str, data: Mapping[str, Any]) -> HookRecord:
        gating = event in GATING
        started = time.monotonic()

        def ended(verdict: str, reason: str = "", code: int | None = None, **more: Any) -> HookRecord:
            if verdict == "failed" and gating:
                verdict, reason = "block", f"the hook failed, so it blocks (hooks that gate fail closed): {reason}"
            return HookRecord(
                event=event,
                command=entry.command,
                verdict=verdict,
                reason=reason[:2000],
                exit_code=code,
                duration_ms=int((time.monotonic() - started) * 1000),
                **more,
            )

        try:
            process = subprocess.Popen(
                ["/bin/sh", "-c", entry.command],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=self.workspace if self.workspace.is_dir() else None,
                env=self._environment(event),
                start_new_session=True,  # its own process group: a timeout ends everything it started
            )
        except OSError as error:
            return ended("failed", f"it could not start ({error})")
        try:
            out, err = process.communicate(json.dumps(data).encode(), timeout=entry.timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            return ended("failed", f"it did not finish in {entry.timeout:g}s")
        returncode = process.returncode
        stdout = out[:_OUTPUT_LIMIT].decode("utf-8", "replace").strip()
        stderr = err[:_OUTPUT_LIMIT].decode("utf-8", "replace").strip()
        if returncode == 2:  # an observer's exit 2 is feedback for the model (Claude Code's PostToolUse)
            if gating:
                return ended("block", stderr or "it exited 2", 2)
            return ended("ok", code=2, context=stderr)
        if returncode != 0:
            why = f"it exited {returncode}" + (f": {stderr.splitlines()[-1]}" if stderr else "")
            if returncode == 127:
                why += " (no such command)"
            return ended("failed", why, returncode)
        if not stdout:
            return ended("allow" if gating else "ok", code=0)
        try:
            answer = json.loads(stdout)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            if gating:
                return ended("failed", f"its output is not a JSON object: {stdout[:200]!r}", 0)
            return ended("ok", code=0, context=stdout[:4000] if event == "SessionStart" else "")
        return _answered(answer, event, gating, ended)

    def _environment(self, event: str) -> dict[str, str]:
        env = {name: os.environ[name] for name in PASSED_ENV if name in os.environ}
        env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
        env.update(
            HARNESS_SESSION_ID=self.session_id,
            HARNESS_HOOK_EVENT=event,
            CLAUDE_PROJECT_DIR=str(self.workspace),  # what Claude Code's hook scripts look for
        )
        return env


def _answered(answer: dict[str, Any], event: str, gating: bool, ended: Any) -> HookRecord:
    """Claude Code's JSON answer: `hookSpecificOutput` (permissionDecision, updatedInput,
    additionalContext), the top-level `decision: block` with `reason`, and `continue: false`."""
    specific = answer.get("hookSpecificOutput")
    specific = specific if isinstance(specific, dict) else {}
    context = specific.get("additionalContext") or answer.get("additionalContext") or ""
    context = context if isinstance(context, str) else json.dumps(context)
    reason = str(specific.get("permissionDecisionReason") or answer.get("reason") or answer.get("stopReason") or "")
    decision = specific.get("permissionDecision") or answer.get("decision")
    if answer.get("continue") is False and gating:
        return ended("block", reason or "the hook said not to continue", 0, context=context)
    if gating and decision in ("deny", "block"):
        return ended("block", reason or f"the hook answered {decision}", 0, context=context)
    if gating and decision == "ask":
        why = "the hook asked for a person's approval, and a hook's question is not one the gate can put"
        return ended("block", f"{why}: {reason}" if reason else why, 0, context=context)
    if gating and decision not in (None, "allow", "approve"):
        return ended("failed", f"it answered an unknown decision {decision!r}", 0)
    if not gating and decision == "block" and reason:  # PostToolUse's feedback to the model
        context = f"{context}\n{reason}".strip()
    updated = specific.get("updatedInput")
    if updated is not None and (event != "PreToolUse" or not isinstance(updated, dict)):
        return ended("failed", "its updatedInput is not a JSON object of the tool's arguments", 0)
    return ended("allow" if gating else "ok", reason, 0, context=context, updated_input=updated)
