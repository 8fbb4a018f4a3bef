"""`harness acp`: harness's own agent as an Agent Client Protocol agent on stdio, for an editor (Zed,
JetBrains, Neovim) or a terminal client (acpx, Toad) that approves calls as they come.

Each ACP session is one harness session of the repository the client names (`cwd`). A prompt is a
`harness run` of that repository with the prompt as its task, or, once the session has a run, a
`harness resume --follow-up` with the prompt as the next request in the same conversation; each in a
process of its own with `harness acp`'s flags (`--model`, `--image`, `--verify`, `--config`, limits)
as the defaults. While it runs, its trajectory is followed and told to the client as it grows: the
model's text and reasoning, a plan of the run's two phases (the work, then verification), each call
with its envelope (an edit's change as ACP diff content), each verification and the outcome. The
gate's `ask` decisions wait in the session's approvals folder (as in any unattended run); each is put
to the client as `session/request_permission` and its answer written back, and a client that does not
answer in the config's `approval_timeout_s` leaves it denied. `session/cancel` interrupts the run as
Ctrl-C would (the call in flight killed, the step recorded); the next prompt goes on from there.
`session/load` tells a session's record again and takes prompts after it, a run that died with its
agent (kill -9) included: the next prompt resumes it. The client's `fs/*` are never used: harness's
copy is the truth, and the user's tree is written only by `harness apply`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.trajectory import (
    EventRecord,
    OutcomeRecord,
    StartRecord,
    ToolRecord,
    TurnRecord,
    VerifyRecord,
    parse_record,
)
from sandbox.durable import write_text_atomic
from sandbox.layout import SessionFolder

PENDING = ".acp-sessions"
"""The state directory's folder of ACP sessions no prompt has run yet."""
CLI = [sys.executable, "-c", "from harness.cli import main; main()"]
POLL_S = 0.15
SHOWN = 20_000
"""Characters of a call's result a client is shown (the whole envelope stays in the record)."""

KINDS = {
    "read_file": "read",
    "list_dir": "read",
    "search_code": "search",
    "apply_patch": "edit",
    "write_file": "edit",
    "run_command": "execute",
    "run_tests": "execute",
    "git_diff": "read",
    "git_status": "read",
    "git_log": "read",
}
STOPS = {"limit:steps": "max_turn_requests", "limit:tokens": "max_tokens", "limit:context": "max_tokens"}


@dataclass
class AcpSession:
    """One ACP session: its harness session, its repository, and the run a prompt started."""

    session_id: str
    repo: Path
    folder: Path
    has_run: bool = False
    process: asyncio.subprocess.Process | None = None
    cancelled: bool = False
    offset: int = 0
    """How far the trajectory has been told (bytes)."""
    calls: dict[str, str] = field(default_factory=dict)
    """A call's id in the record → its ACP tool call id."""
    unanswered: dict[str, str] = field(default_factory=dict)
    """ACP tool call ids told as started with no result yet → their titles."""
    settings: dict[str, str] = field(default_factory=dict)
    """What the client set through session config options (`model`, `image`, `max_steps`): the flags
    of this session's next run over `harness acp`'s."""
    asked: set[str] = field(default_factory=set)
    asking: set[asyncio.Future[None]] = field(default_factory=set)
    verify: str = ""


class HarnessAgent:
    """The ACP agent (the SDK's `Agent` protocol, matched by shape): see the module."""

    def __init__(self, sessions: Path, defaults: list[str], version: str) -> None:
        self.sessions, self.defaults, self.version = sessions, defaults, version
        self.conn: Any = None
        self.open: dict[str, AcpSession] = {}

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    # --- the protocol ------------------------------------------------------------------------

    async def initialize(self, protocol_version: int, client_capabilities: Any = None, **kwargs: Any) -> Any:
        import acp
        from acp import schema

        return schema.InitializeResponse(
            protocol_version=acp.PROTOCOL_VERSION,
            agent_capabilities=schema.AgentCapabilities(load_session=True),
            agent_info=schema.Implementation(name="harness", title="harness", version=self.version),
        )

    async def authenticate(self, method_id: str, **kwargs: Any) -> Any:
        return None

    async def new_session(self, cwd: str, mcp_servers: Any = None, **kwargs: Any) -> Any:
        from acp import RequestError, schema

        repo = Path(cwd)
        if not repo.is_absolute() or not repo.is_dir():
            raise RequestError.invalid_params({"cwd": f"not a directory here: {cwd}"})
        ident = f"acp-{secrets.token_hex(5)}"
        self.open[ident] = AcpSession(ident, repo, self.sessions / ident)
        self._pending(ident).parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(self._pending(ident), json.dumps({"cwd": str(repo)}))  # a later process may load it
        return schema.NewSessionResponse(session_id=ident, config_options=self._options(self.open[ident]))

    def _pending(self, ident: str) -> Path:
        """Where a session with no run yet is remembered (its folder is made by its first run)."""
        return self.sessions / PENDING / f"{ident}.json"

    async def load_session(self, cwd: str, session_id: str, mcp_servers: Any = None, **kwargs: Any) -> Any:
        from acp import RequestError, schema

        folder = self.sessions / session_id
        named = "/" not in session_id and session_id not in ("", ".", "..")
        ran = named and SessionFolder(folder).trajectory.is_file()
        if not ran and not (named and self._pending(session_id).is_file()):
            raise RequestError.invalid_params({"sessionId": f"harness has no session {session_id!r} here"})
        repo = Path(cwd)
        if not ran:  # the folder its session/new named, not the one this request names
            with contextlib.suppress(OSError, ValueError, TypeError):
                repo = Path(json.loads(self._pending(session_id).read_text(encoding="utf-8"))["cwd"])
        served = AcpSession(session_id, repo, folder, has_run=ran)
        self.open[session_id] = served
        await self._tell(served, replay=True)
        return schema.LoadSessionResponse(config_options=self._options(served))

    async def set_session_mode(self, session_id: str, mode_id: str, **kwargs: Any) -> Any:
        return None

    async def set_config_option(self, config_id: str, session_id: str, value: str | bool, **kwargs: Any) -> Any:
        """The client changes a default for this session's next run: its model, image (before its first
        run only: a session's image is its own) or step limit."""
        from acp import RequestError, schema

        served = self.open.get(session_id)
        if served is None:
            raise RequestError.invalid_params({"sessionId": f"no open session {session_id!r}"})
        text = str(value).strip()
        if config_id == "model":
            from harness.providers.vendor import VENDORS, prefix_of

            if prefix_of(text) not in VENDORS or ":" not in text:
                raise RequestError.invalid_params({"value": f"a model is PROVIDER:MODEL, not {text!r}"})
        elif config_id == "image":
            if served.has_run:
                raise RequestError.invalid_params({"value": "the session's image is fixed once it has run"})
            if text not in self._images():
                raise RequestError.invalid_params({"value": f"no image {text!r}: {', '.join(self._images())}"})
        elif config_id == "max_steps":
            if not text.isdigit() or not 1 <= int(text) <= 10_000:
                raise RequestError.invalid_params({"value": f"steps are a number from 1 to 10000, not {text!r}"})
        else:
            raise RequestError.invalid_params({"configId": f"no option {config_id!r}: model, image, max_steps"})
        served.settings[config_id] = text
        return schema.SetSessionConfigOptionResponse(config_options=self._options(served))

    def _default(self, flag: str) -> str:
        """The value of one of `harness acp`'s flags (the last given), or ''."""
        found = [self.defaults[i + 1] for i, given in enumerate(self.defaults[:-1]) if given == flag]
        return found[-1] if found else ""

    def _images(self) -> list[str]:
        from harness.assembly import engine

        return engine.session_images()

    def _options(self, served: AcpSession) -> list[Any]:
        from acp import schema

        def select(ident: str, name: str, current: str, values: list[str], category: Any = None) -> Any:
            choices = [
                schema.SessionConfigSelectOption(value=v, name=v) for v in dict.fromkeys([current, *values]) if v
            ]
            return schema.SessionConfigOptionSelect(
                id=ident, name=name, current_value=current, options=choices, category=category, type="select"
            )

        model = served.settings.get("model") or self._default("--model")
        image = served.settings.get("image") or self._default("--image") or "py311"
        steps = served.settings.get("max_steps") or self._default("--max-steps") or "40"
        return [
            select("model", "Model", model, [], "model"),
            select("image", "Sandbox image", image, self._images()),
            select("max_steps", "Step limit", steps, ["20", "40", "100", "200"]),
        ]

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> Any:
        import acp
        from acp import RequestError, schema

        served = self.open.get(session_id)
        if served is None:
            raise RequestError.invalid_params({"sessionId": f"no open session {session_id!r}"})
        if served.process is not None:
            raise RequestError.invalid_request({"sessionId": "a prompt of this session is running"})
        text = "\n".join(str(getattr(block, "text", "") or "") for block in prompt).strip()
        if not text:
            raise RequestError.invalid_params({"prompt": "an empty prompt"})
        chosen = [part for key, flag in (("model", "--model"), ("max_steps", "--max-steps"))
                  if key in served.settings for part in (flag, served.settings[key])]  # fmt: skip
        if served.has_run:
            args = ["resume", session_id, "--follow-up", text, "--json", *chosen]
        else:
            image = ["--image", served.settings["image"]] if "image" in served.settings else []
            args = ["run", str(served.repo), "--task", text, "--session", session_id, "--json", *self.defaults,
                    *chosen, *image]  # fmt: skip
        served.cancelled, served.has_run = False, True
        await self._plan(served, working="in_progress", verifying="pending")
        served.process = await asyncio.create_subprocess_exec(
            *CLI, *args, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env={**os.environ, "HARNESS_STATE_DIR": str(self.sessions)},
            preexec_fn=_ends_with_parent,
        )  # fmt: skip
        following = asyncio.ensure_future(self._follow(served))
        try:
            out, err = await served.process.communicate()
        finally:
            served.process = None
            await asyncio.sleep(POLL_S)
            following.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await following
        await self._tell(served)
        for ident in list(served.unanswered):  # cut short (a cancel, a stop): killed in flight, run again later
            served.unanswered.pop(ident)
            cut = "killed in flight by the cancel" if served.cancelled else "not finished: the run stopped"
            note = acp.tool_content(acp.text_block(f"{cut}; the next prompt runs it again"))
            await self.conn.session_update(
                session_id=served.session_id, update=acp.update_tool_call(ident, status="failed", content=[note])
            )
        result = _result_of(out)
        if result is None:
            said = " ".join(err.decode("utf-8", "replace").split())[-800:]
            await self._say(served, f"\nharness could not run this: {said or 'no word from it'}\n")
            return schema.PromptResponse(stop_reason="cancelled" if served.cancelled else "refusal")
        outcome = str(result.get("outcome", ""))
        await self._plan(served, working="completed", verifying="completed" if outcome == "verified" else "pending")
        if served.cancelled:
            return schema.PromptResponse(stop_reason="cancelled")
        return schema.PromptResponse(stop_reason=STOPS.get(outcome, "end_turn"))

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        served = self.open.get(session_id)
        if served is not None and served.process is not None and served.process.returncode is None:
            served.cancelled = True
            with contextlib.suppress(ProcessLookupError):
                served.process.send_signal(signal.SIGINT)

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        from acp import RequestError

        raise RequestError.method_not_found(method)

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None

    # --- following a run -----------------------------------------------------------------------

    async def _follow(self, served: AcpSession) -> None:
        """Tell the run's record as it grows, and put each approval it waits on to the client."""
        while True:
            await self._tell(served)
            await self._approvals(served)
            await asyncio.sleep(POLL_S)

    async def _tell(self, served: AcpSession, replay: bool = False) -> None:
        for record in _new_records(served):
            for update in self._updates(served, record, replay):
                await self.conn.session_update(session_id=served.session_id, update=update)

    def _updates(self, served: AcpSession, record: Any, replay: bool) -> list[Any]:
        import acp

        if record.agent is not None:  # a sub-agent's: its parent's delegate call stands for it
            return []
        if isinstance(record, StartRecord):
            served.verify = str(record.config.get("verify") or "")
            return [acp.update_user_message_text(record.task)] if replay and not record.resumed else []
        if isinstance(record, EventRecord) and record.event == "follow_up":
            return [acp.update_user_message_text(record.detail)] if replay else []
        if isinstance(record, TurnRecord):
            return self._turn(served, record)
        if isinstance(record, ToolRecord):
            return [self._result(served, record)]
        if isinstance(record, VerifyRecord):
            said = "passed" if record.passed else f"failed (exit {record.exit_code})"
            failing = f": {', '.join(record.failing[:10])}" if record.failing and not record.passed else ""
            what = record.command or served.verify or "verify"
            return [acp.update_agent_message_text(f"\nverify `{what}` {said}{failing}\n")]
        if isinstance(record, OutcomeRecord):
            return [acp.update_agent_message_text(f"\nharness: {record.outcome}: {record.detail}\n")]
        return []

    def _turn(self, served: AcpSession, record: TurnRecord) -> list[Any]:
        import acp

        updates: list[Any] = []
        turn = record.turn
        if turn.reasoning is not None and turn.reasoning.text.strip():
            updates.append(acp.update_agent_thought_text(turn.reasoning.text))
        if turn.text.strip():
            updates.append(acp.update_agent_message_text(turn.text + "\n"))
        for call in turn.tool_calls:
            ident = f"{record.step}-{call.id}"
            served.calls[call.id] = ident
            served.unanswered[ident] = _title(call.name, call.arguments)
            updates.append(
                acp.start_tool_call(
                    ident,
                    _title(call.name, call.arguments),
                    kind=KINDS.get(call.name, "other"),  # type: ignore[arg-type]
                    status="pending",
                    raw_input=call.arguments,
                )
            )
        return updates

    def _result(self, served: AcpSession, record: ToolRecord) -> Any:
        import acp

        content: list[Any] = [acp.tool_content(acp.text_block(record.text[:SHOWN]))]
        arguments = record.arguments
        if record.wrote and not record.is_error and isinstance(arguments.get("path"), str):
            if record.name == "apply_patch" and isinstance(arguments.get("new_text"), str):
                content.append(
                    acp.tool_diff_content(
                        arguments["path"], arguments["new_text"], str(arguments.get("old_text") or "")
                    )
                )
            elif record.name == "write_file" and isinstance(arguments.get("content"), str):
                content.append(acp.tool_diff_content(arguments["path"], arguments["content"], None))
        envelope = record.envelope.model_dump(mode="json") if record.envelope is not None else None
        ident = served.calls.get(record.call_id, f"{record.step}-{record.call_id}")
        served.unanswered.pop(ident, None)
        return acp.update_tool_call(
            ident,
            status="failed" if record.is_error else "completed",
            content=content,
            raw_output={"envelope": envelope, "decision": record.decision.model_dump() if record.decision else None},
        )

    async def _plan(self, served: AcpSession, *, working: str, verifying: str) -> None:
        import acp

        check = f"Verify: `{served.verify}`" if served.verify else "Verify (the session's verify command)"
        entries = [
            acp.plan_entry("Work on the request, every call in a fresh container", priority="high", status=working),  # type: ignore[arg-type]
            acp.plan_entry(check, priority="high", status=verifying),  # type: ignore[arg-type]
        ]
        await self.conn.session_update(session_id=served.session_id, update=acp.update_plan(entries))

    async def _say(self, served: AcpSession, text: str) -> None:
        import acp

        await self.conn.session_update(session_id=served.session_id, update=acp.update_agent_message_text(text))

    async def _approvals(self, served: AcpSession) -> None:
        """Each `ask` the run waits on, put to the client; its answer written where the run reads it."""
        folder = SessionFolder(served.folder).approvals
        if not folder.is_dir():
            return
        for request in sorted(folder.glob("*.request.json")):
            if request.name in served.asked:
                continue
            served.asked.add(request.name)
            try:
                asked = json.loads(request.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            asking = asyncio.ensure_future(self._ask(served, request.parent, asked))
            served.asking.add(asking)  # kept until answered (a task nobody holds may be collected)
            asking.add_done_callback(served.asking.discard)

    async def _ask(self, served: AcpSession, folder: Path, asked: dict[str, Any]) -> None:
        from acp import schema

        call_id = str(asked.get("call_id") or "")
        answer_file = folder / Path(str(asked.get("answer_file") or "")).name
        rule = (asked.get("asked") or {}).get("rule", "ask")
        options = [
            schema.PermissionOption(option_id="allow", name="Allow this call", kind="allow_once"),
            schema.PermissionOption(option_id="deny", name="Deny it", kind="reject_once"),
        ]
        tool_call = schema.ToolCallUpdate(
            tool_call_id=served.calls.get(call_id, call_id), status="pending",
            title=f"{asked.get('summary', call_id)} (rule {rule})",
        )  # fmt: skip
        try:
            answered = await asyncio.wait_for(
                self.conn.request_permission(session_id=served.session_id, tool_call=tool_call, options=options),
                timeout=float(asked.get("timeout_s") or 30.0),
            )
        except Exception:  # noqa: BLE001 - no answer in time, or a client that cannot ask: the run denies it
            return
        outcome = getattr(answered, "outcome", None)
        chosen = getattr(outcome, "option_id", None) if getattr(outcome, "outcome", "") == "selected" else None
        if answer_file.name.endswith(".answer"):
            write_text_atomic(answer_file, "allow" if chosen == "allow" else "deny")


def _new_records(served: AcpSession) -> list[Any]:
    """The records the trajectory gained since the last look (whole lines only)."""
    path = SessionFolder(served.folder).trajectory
    try:
        with path.open("rb") as handle:
            handle.seek(served.offset)
            data = handle.read()
    except OSError:
        return []
    end = data.rfind(b"\n") + 1
    served.offset += end
    found = []
    for line in data[:end].splitlines():
        with contextlib.suppress(ValueError):
            found.append(parse_record(json.loads(line)))
    return found


def _title(name: str, arguments: dict[str, Any]) -> str:
    shown = arguments.get("command") or arguments.get("path") or arguments.get("pattern") or ""
    return f"{name} {str(shown)[:200]}".strip()


def _result_of(out: bytes) -> dict[str, Any] | None:
    try:
        found = json.loads(out.decode("utf-8", "replace"))
    except ValueError:
        return None
    return found if isinstance(found, dict) and "outcome" in found else None


def _ends_with_parent() -> None:
    """In a run's process: SIGTERM when `harness acp` dies (even by kill -9), so a run nobody follows
    ends as an interrupted one (its record written, resumable), not on its own."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def serve(sessions: Path, defaults: list[str]) -> None:
    """Speak ACP on this process's stdin and stdout until the client closes them."""
    import stat

    import acp

    from harness.errors import UsageError
    from harness.version import harness_version

    for fd, name in ((0, "stdin"), (1, "stdout")):
        if stat.S_ISREG(os.fstat(fd).st_mode) or stat.S_ISDIR(os.fstat(fd).st_mode):
            raise UsageError(f"harness acp speaks ACP on its {name}, which is a file here: start it from an ACP client")
    asyncio.run(acp.run_agent(HarnessAgent(sessions, defaults, harness_version())))  # type: ignore[arg-type]
