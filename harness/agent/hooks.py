"""Lifecycle hooks in Claude Code's shape, failing closed where they gate.

A hook is a program of the user's (`[[hooks.EVENT]]` in the config file, never a repository's) run
on this machine, one at a time in the order given, with the event's JSON on stdin and a time limit.
Its answer is Claude Code's: exit 0 with nothing or a JSON object on stdout; exit 2 blocks, stderr
being the reason the model is given. Where Claude Code lets a failing hook through, harness does not
for the events that gate (PreToolUse, Stop): any other exit code, a timeout, a command that cannot
start, or stdout that is not a JSON object blocks, and the model and the trajectory say which hook
and why. The observers (SessionStart, PostToolUse, SessionEnd) fail open with a warning recorded.

A hook's environment is a short whitelist (PATH, HOME, the locale, TMPDIR, and the session's own
values), never the controller's: no API key reaches a hook. Its git sees the workspace's history
under a git directory of harness's own, never the repository's config or hooks (harness.agent.hook_git).

Every hook is bounded (harness.bounded): its time limit, never past the run's wall clock (and a
repository's never past a call's), covers every process it starts, detached ones included; its
output is read in pieces, the first 64 KiB of each stream kept. A matcher is a regular expression
run with a time limit: one that cannot decide in time matches (the hook runs and decides).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import regex

from harness.agent.hook_git import git_environment
from harness.bounded import run_bounded
from harness.config import HookEntry, HooksConfig
from harness.deadline import UNLIMITED, Deadline
from harness.trajectory import HookRecord
from sandbox.spec import Sandbox, SandboxSpec

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
MATCH_TIME_S = 0.05
"""How long a matcher may take on one tool name before it is taken as matching."""
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

    def __init__(
        self,
        config: HooksConfig,
        *,
        session_id: str,
        workspace: Path,
        transcript: Path,
        repository: HooksConfig | None = None,
        container: tuple[Sandbox, Callable[[], SandboxSpec]] | None = None,
    ) -> None:
        self.config = config
        self.repository = repository or HooksConfig()
        """The repository's own hooks (`--repo-hooks`): run only in a sandbox container, after the user's."""
        self.session_id = session_id
        self.workspace = workspace
        self.transcript = transcript
        self.container = container
        """The session's sandbox and the spec of its calls (for the repository's hooks)."""

    def __bool__(self) -> bool:
        return any(getattr(c, event) for c in (self.config, self.repository) for event in HooksConfig.model_fields)

    def for_subagent(self, session_id: str, workspace: Path, spec: Callable[[], SandboxSpec]) -> Hooks:
        """The hooks of a sub-agent: the tool events only (its calls are gated as its parent's are; its
        start and end are its parent's delegate call, not a session's, and its parent's Stop decides),
        seeing its own workspace."""
        tools_only = {"PreToolUse", "PostToolUse"}

        def kept(config: HooksConfig) -> HooksConfig:
            return config.model_copy(update={e: [] for e in HooksConfig.model_fields if e not in tools_only})

        container = (self.container[0], spec) if self.container is not None else None
        return Hooks(
            kept(self.config),
            session_id=session_id,
            workspace=workspace,
            transcript=self.transcript,
            repository=kept(self.repository),
            container=container,
        )

    def placed(self, event: str, tool_name: str | None = None) -> list[tuple[HookEntry, str]]:
        """The hooks of event that apply (a tool event's by its matcher), the user's on this machine
        first, then the repository's in a container."""
        found = [(e, "host") for e in _matching(self.config, event, tool_name)]
        return found + [(e, "container") for e in _matching(self.repository, event, tool_name)]

    def wanted(self, event: str, tool_name: str | None = None) -> list[HookEntry]:
        return [entry for entry, _ in self.placed(event, tool_name)]

    def run(
        self, event: str, payload: Mapping[str, Any], *, step: int = 0, deadline: Deadline = UNLIMITED
    ) -> HookOutcome:
        """Run event's hooks in order with payload (the common fields are added); the first that
        blocks ends the event (a later hook never overrides a refusal). None runs past deadline."""
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
        for entry, place in self.placed(event, tool_name if isinstance(tool_name, str) else None):
            if outcome.updated_input is not None:
                data["tool_input"] = outcome.updated_input  # the next hook sees the input it will get
            record = self._one(entry, event, data, place, deadline)
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

    def _one(self, entry: HookEntry, event: str, data: Mapping[str, Any], place: str, deadline: Deadline) -> HookRecord:
        gating = event in GATING
        started = time.monotonic()
        notes: list[str] = []

        def ended(verdict: str, reason: str = "", code: int | None = None, **more: Any) -> HookRecord:
            if verdict == "failed" and gating:
                verdict, reason = "block", f"the hook failed, so it blocks (hooks that gate fail closed): {reason}"
            return HookRecord(
                event=event,
                command=entry.command,
                place=place,
                verdict=verdict,
                reason=reason[:2000],
                exit_code=code,
                duration_ms=int((time.monotonic() - started) * 1000),
                bounds="; ".join(notes),
                **more,
            )

        if place == "container":  # the container's own view: no path of this machine goes in
            data = {**data, "cwd": "/workspace", "transcript_path": ""}
        stdin = json.dumps(data).encode()
        if place == "container":
            ran = self._in_container(entry, stdin, deadline)
        else:
            ran = self._on_host(entry, event, stdin, deadline, notes)
        if isinstance(ran, str):
            return ended("failed", ran)
        returncode, out, err = ran
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

    def _on_host(
        self, entry: HookEntry, event: str, stdin: bytes, deadline: Deadline, notes: list[str]
    ) -> tuple[int, bytes, bytes] | str:
        """The user's hook on this machine, bounded (harness.bounded): (exit code, stdout, stderr), or
        why it did not finish; notes get what its bounds did (output not kept, processes ended)."""
        limit = deadline.seconds(entry.timeout)
        with tempfile.TemporaryDirectory(prefix="harness-hook-git-") as view:
            environment = {**self._environment(event), **git_environment(self.workspace, Path(view))}
            try:
                finished = run_bounded(
                    ["/bin/sh", "-c", entry.command],
                    stdin=stdin,
                    timeout_s=limit,
                    cap=_OUTPUT_LIMIT,
                    env=environment,
                    cwd=self.workspace if self.workspace.is_dir() else None,
                )
            except OSError as error:
                return f"it could not start ({error})"
        if finished.dropped:
            notes.append(f"{finished.dropped} bytes of its output past {_OUTPUT_LIMIT // 1024} KiB were not kept")
        if finished.ended_left:
            notes.append(f"{finished.ended_left} process(es) it left running were ended")
        if finished.returncode is None:
            return _late(entry.timeout, limit)
        return finished.returncode, finished.stdout, finished.stderr

    def _in_container(self, entry: HookEntry, stdin: bytes, deadline: Deadline) -> tuple[int, bytes, bytes] | str:
        """A repository's hook in a fresh sandbox container of the session, as a tool call runs: no
        network, the call's limits (its time limit never beyond a call's), the workspace mounted
        read-only at /workspace (its working directory a scratch folder that goes with the
        container). Never on this machine."""
        from sandbox.spec import Mount

        if self.container is None:
            return "no sandbox to run a repository's hook in"
        sandbox, spec_of = self.container
        call = spec_of()
        limit = deadline.seconds(min(entry.timeout, call.timeout_s))
        spec = call.model_copy(update={"timeout_s": limit, "workdir": "/hook", "network": "none"})
        with tempfile.TemporaryDirectory(prefix="harness-hook-") as scratch:
            prelude = f"cd /workspace && export CLAUDE_PROJECT_DIR=/workspace HARNESS_SESSION_ID={self.session_id}"
            envelope = sandbox.run(
                ["/bin/sh", "-c", f"{prelude} && {entry.command}"],
                workspace=Path(scratch),
                spec=spec,
                mounts=[Mount(source=self.workspace, target="/workspace", read_only=True)],
                stdin=stdin,
                refill=False,
            )
        if envelope.status == "timeout":
            return _late(entry.timeout, limit)
        if envelope.status not in ("ok", "exit_nonzero"):
            return f"its container ended {envelope.status}"
        return envelope.exit_code, envelope.stdout.encode(), envelope.stderr.encode()

    def _environment(self, event: str) -> dict[str, str]:
        env = {name: os.environ[name] for name in PASSED_ENV if name in os.environ}
        env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
        env.update(
            HARNESS_SESSION_ID=self.session_id,
            HARNESS_HOOK_EVENT=event,
            CLAUDE_PROJECT_DIR=str(self.workspace),  # what Claude Code's hook scripts look for
        )
        return env


def _late(asked: float, limit: float) -> str:
    if limit < asked:
        return f"it did not finish in {limit:g}s (its own limit is {asked:g}s; the run's or a call's ends sooner)"
    return f"it did not finish in {asked:g}s"


def _matching(config: HooksConfig, event: str, tool_name: str | None) -> list[HookEntry]:
    entries: list[HookEntry] = getattr(config, event)
    if tool_name is None:
        return list(entries)
    aliases = [tool_name, *(claude for claude, ours in CLAUDE_NAMES.items() if ours == tool_name)]
    return [e for e in entries if e.matcher in ("", "*") or any(matches(e.matcher, n) for n in aliases)]


def matches(matcher: str, name: str) -> bool:
    """The matcher matches the whole name; one that cannot decide within MATCH_TIME_S matches (a
    gating hook then runs and decides: a slow pattern costs a call that much, never a core)."""
    try:
        return regex.fullmatch(matcher, name, timeout=MATCH_TIME_S) is not None
    except TimeoutError:
        return True


REPOSITORY_HOOKS = ".harness/hooks.toml"
"""Where a repository declares its hooks (read only with `--repo-hooks`, run only in a container)."""
CLAUDE_SETTINGS = ".claude/settings.json"
"""Claude Code's project settings: their `hooks` are taken the same way (with `--repo-hooks` only)."""
_REPOSITORY_HOOKS_LIMIT = 64 * 1024


def repository_hooks(read: Callable[[str], bytes | None] | Path) -> HooksConfig:
    """The hooks a repository declares, read as hostile input (regular files, never a link the
    repository made, at most 64 KiB each): REPOSITORY_HOOKS (`[[hooks.EVENT]]` tables and nothing
    else), then the `hooks` of CLAUDE_SETTINGS in Claude Code's shape (`{"matcher", "hooks": [{"type":
    "command", "command", "timeout"}]}`). `read` gives a regular file's bytes by its path (a run reads
    the session's start tree, never what the model wrote since), or is a folder to read them from.
    Used only with `--repo-hooks`, and run only in a container."""
    import tomllib

    from harness.errors import ConfigError

    reader = read if callable(read) else _folder_reader(read)
    reader = _regular(reader)
    events: dict[str, list[dict[str, Any]]] = {}
    text = _repository_file(reader, REPOSITORY_HOOKS)
    if text is not None:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            raise ConfigError(f"the repository's {REPOSITORY_HOOKS} is not valid TOML: {error}") from None
        if set(data) - {"hooks"}:
            raise ConfigError(f"the repository's {REPOSITORY_HOOKS} may hold only [[hooks.EVENT]] tables")
        events = dict(data.get("hooks") or {})
    text = _repository_file(reader, CLAUDE_SETTINGS)
    if text is not None:
        for event, entries in _claude_hooks(text).items():
            events[event] = [*events.get(event, []), *entries]
    try:
        return HooksConfig.model_validate(events)
    except ValueError as error:
        raise ConfigError(f"the repository's hooks: {str(error).splitlines()[0]}") from None


def stored_reader(
    kind_of: Callable[[str], str | None], read: Callable[[str], bytes | None]
) -> Callable[[str], bytes | None]:
    """A reader of a stored tree for repository_hooks: a path that is there but no regular file (a
    link, or under a linked folder; a folder; a large file) is refused, never taken as absent."""

    def reader(relative: str) -> bytes | None:
        kind = kind_of(relative)
        if kind is None:
            return None
        if kind != "file":
            raise NotRegular(relative, kind)
        return read(relative)

    return reader


class NotRegular(Exception):
    """A repository file that is there but not a regular file."""

    def __init__(self, relative: str, kind: str) -> None:
        super().__init__(relative)
        self.relative, self.kind = relative, kind


def _regular(reader: Callable[[str], bytes | None]) -> Callable[[str], bytes | None]:
    from harness.errors import ConfigError

    def read(relative: str) -> bytes | None:
        try:
            return reader(relative)
        except NotRegular as refused:
            what = {"link": "a link (or under a linked folder)", "folder": "a folder", "large": "a large file"}
            raise ConfigError(
                f"--repo-hooks: the repository's {relative} is {what.get(refused.kind, 'not a regular file')}, "
                "not a regular file: a link is never followed, so its hooks cannot be read (remove "
                "--repo-hooks to run without them)"
            ) from None

    return read


def _folder_reader(folder: Path) -> Callable[[str], bytes | None]:
    def read(relative: str) -> bytes | None:
        import stat

        path = folder / relative
        try:
            info, parent = path.lstat(), path.parent.lstat()
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(info.st_mode) or stat.S_ISLNK(parent.st_mode):
            raise NotRegular(relative, "link")
        if not stat.S_ISREG(info.st_mode) or not stat.S_ISDIR(parent.st_mode):
            raise NotRegular(relative, "other")
        with open(path, "rb") as handle:
            return handle.read(_REPOSITORY_HOOKS_LIMIT + 1)

    return read


def _repository_file(read: Callable[[str], bytes | None], relative: str) -> str | None:
    from harness.errors import ConfigError

    data = read(relative)
    if data is None:
        return None
    if len(data) > _REPOSITORY_HOOKS_LIMIT:
        raise ConfigError(f"the repository's {relative} is over {_REPOSITORY_HOOKS_LIMIT // 1024} KiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"the repository's {relative} is not UTF-8 text") from None


def _claude_hooks(text: str) -> dict[str, list[dict[str, Any]]]:
    """Claude Code's `hooks` settings as harness's entries (events harness has; command hooks only)."""
    from harness.errors import ConfigError

    try:
        settings = json.loads(text)
    except ValueError as error:
        raise ConfigError(f"the repository's {CLAUDE_SETTINGS} is not valid JSON: {error}") from None
    hooks = settings.get("hooks") if isinstance(settings, dict) else None
    found: dict[str, list[dict[str, Any]]] = {}
    for event, groups in (hooks if isinstance(hooks, dict) else {}).items():
        if event not in HooksConfig.model_fields or not isinstance(groups, list):
            continue
        for group in (g for g in groups if isinstance(g, dict)):
            for hook in (h for h in group.get("hooks") or () if isinstance(h, dict) and h.get("type") == "command"):
                entry: dict[str, Any] = {
                    "command": str(hook.get("command") or ""),
                    "matcher": str(group.get("matcher") or ""),
                }
                if isinstance(hook.get("timeout"), int | float):
                    entry["timeout"] = min(float(hook["timeout"]), 3600.0)
                found.setdefault(event, []).append(entry)
    return found


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
