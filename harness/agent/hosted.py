"""A hosted agent's session, harness on the client's side of ACP (the Agent Client Protocol's Python SDK).

The agent (Claude Code, Codex...) runs in a container of its own (harness.environment.agents); this
process speaks ACP to it over that container's stdio (a bridge process attached to it). What the agent
does becomes the loop's turns (harness.agent.external): each tool call of harness's it makes through
MCP is run by the loop; each call it makes itself and reports (an edit in its container) is a step of
its own; its words end a turn; the end of its prompt lets verification decide, and a failed
verification is its next prompt. When it asks permission (`session/request_permission`), harness's
gate answers, with the user's PreToolUse hooks: default deny, `ask` rules denied (nobody to ask
mid-call). A `terminal/*` command it asks the client to run is a `run_command` of the loop: a fresh
container each. Its file-system requests are not served: the workspace is its own copy, in its container.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shlex
import subprocess
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any, Protocol

from harness.agent.external import ExternalTurns, Report
from harness.errors import ModelUnavailable
from harness.policy.decision import Decision
from harness.policy.gate import GateRequest
from sandbox import stopping

HARNESS_SERVER = "harness"
"""The name of harness's MCP server in the agent's session (its tools: `mcp__harness__run_command`)."""
BOOKKEEPING = {"call_id", "turn_id", "started_at_ms"}
"""Keys of an agent's raw input that are its own bookkeeping, not the call's arguments (Codex's)."""
WRITERS = {"Edit", "MultiEdit", "Write", "NotebookEdit", "replace", "write_file", "edit", "write", "patch"}
"""The agents' own tools that write (Claude Code's, Gemini CLI's, opencode's): gated as harness's writes."""
READERS = {
    "Read": "read_file", "Glob": "list_dir", "Grep": "search_code", "LS": "list_dir",
    "read_file": "read_file", "read_many_files": "read_file", "list_directory": "list_dir", "glob": "list_dir",
    "grep_search": "search_code", "read": "read_file", "grep": "search_code", "list": "list_dir",
}  # fmt: skip
"""The agents' own tools that read, and the harness tool the gate is asked about for each."""
SHELLS = {"Bash", "run_shell_command", "bash", "shell", "exec", "local_shell"}
"""The agents' own shell tools (`--agent-shell own`): gated as harness's run_command."""
MCP_PREFIXES = (f"mcp__{HARNESS_SERVER}__", f"mcp_{HARNESS_SERVER}_", f"{HARNESS_SERVER}_")
"""How an agent names a tool of harness's MCP server (Claude Code's mcp__SERVER__TOOL, Gemini CLI's
mcp_SERVER_TOOL, opencode's SERVER_TOOL; Codex says {server, tool} in the call's raw input)."""
TOOL_ID = re.compile(r"([A-Za-z][A-Za-z0-9_.-]{0,80})__")
"""A call id that starts with its tool's name (Gemini CLI's TOOL__TOOL_TIME_N)."""
GUIDANCE = (
    "\n\nHow to work here: this workspace is a copy of the repository. Run every shell command, the tests "
    "included, with the `run_command` tool of the `harness` MCP server (each runs in a fresh sandbox and "
    "returns its exit code and output); your own shell is not available. Edit files with your own tools. "
    "When you are done, say what you changed and how you checked it."
)
RESUMED = (
    "harness was stopped and has started again. The workspace is as it was after the last step harness "
    "recorded. Go on with the task:\n\n"
)
CONTINUED = (
    "This task was begun in an earlier session, which this one does not go on from. The workspace is as "
    "that session's work left it at the last step harness recorded: look at it before you change it. "
    "The task:\n\n"
)


@dataclass
class _Call:
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    kind: str = ""
    decision: Decision | None = None
    harness_tool: str | None = None
    """The harness tool it calls through harness's MCP server (the loop gates and runs it), if it does."""
    locations: tuple[str, ...] = ()
    """The paths the agent said the call touches (ACP's `locations`)."""
    reported: bool = False
    """Its step is recorded (a refused call is, when refused; its later update adds nothing)."""


class FileRefused(Exception):
    """A file-system request of the agent's harness refused or could not serve (its message says why)."""


class Files(Protocol):
    """The workspace as the agent's `fs/*` requests reach it: through the sandbox, never the host."""

    def read(self, path: str, line: int | None, limit: int | None) -> str:
        """The text of a workspace file (lines from `line`, at most `limit`); FileRefused otherwise."""
        ...

    def write(self, path: str, content: str) -> None:
        """Write a workspace file (a step of the run); FileRefused otherwise."""
        ...


class HostedSession:
    """One agent's ACP session (see the module); the Prompter of its run's ExternalTurns."""

    def __init__(
        self,
        bridge: Sequence[str],
        turns: ExternalTurns,
        *,
        workdir: str,
        mcp_url: str,
        session_meta: dict[str, Any],
        decide: Callable[[GateRequest, str, dict[str, Any]], tuple[bool, str, Decision | None]],
        resume_id: str | None = None,
        resumed: bool = False,
        recorded: frozenset[str] = frozenset(),
        on_session: Callable[[str], None] = lambda sid: None,
        settled: Callable[[float], bool] = lambda timeout: True,
    ) -> None:
        self.bridge, self.turns, self.workdir, self.mcp_url = list(bridge), turns, workdir, mcp_url
        self.session_meta, self.decide, self.on_session = session_meta, decide, on_session
        self.settled = settled
        """Waits until the model traffic of the turn is billed (its last answer's usage told)."""
        self.files: Files | None = None
        """The workspace for the agent's `fs/read_text_file` and `fs/write_text_file` (set with decide)."""
        self.resume_id, self.resumed = resume_id, resumed
        """The agent's own session to load, if it had one; whether harness resumed (or forked) the run."""
        self.recorded = recorded
        """The ids of the calls of its own the agent reported before (the run's record): a loaded session
        replays them, and an update of one of them is history, never a new step."""
        self.session_id: str | None = None
        self.loaded = False
        """The session went on from its earlier one (`session/load`) rather than anew."""
        self.not_loaded = ""
        """Why it did not, when it was to: the agent offers no session/load, or what its answer said."""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="harness-acp", daemon=True)
        self._process: asyncio.subprocess.Process | None = None
        self._conn: Any = None
        self._calls: dict[str, _Call] = {}
        self._terminals: dict[str, threading.Thread] = {}
        self._outputs: dict[str, tuple[str, int | None]] = {}
        self._killed: set[str] = set()
        self._calls_of: dict[str, str] = {}
        """Each terminal's call id in the loop (unique in the process: sandbox.stopping stops it by it)."""
        self._prompts = 0
        self.refusals: list[str] = []
        """What harness refused since the last prompt (the next one says so: an agent may end its turn
        on a refusal without hearing why)."""
        self._replaying = False

    # --- life --------------------------------------------------------------------------------

    def start(self, timeout_s: float = 120.0) -> HostedSession:
        """Start the bridge and the ACP session (initialize, then session/load or session/new)."""
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._open(), self._loop).result(timeout_s)
        return self

    async def _open(self) -> None:
        import acp
        from acp import schema

        self._process = await asyncio.create_subprocess_exec(
            *self.bridge, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, limit=50 << 20
        )
        client: Any = _Client(self)  # the SDK's Client protocol, matched by shape
        self._conn = acp.connect_to_agent(client, self._process.stdin, self._process.stdout)
        capabilities = schema.ClientCapabilities(
            fs=schema.FileSystemCapabilities(read_text_file=True, write_text_file=True), terminal=True
        )
        init = await self._unless_exited(
            self._conn.initialize(protocol_version=acp.PROTOCOL_VERSION, client_capabilities=capabilities)
        )
        servers = [schema.HttpMcpServer(type="http", name=HARNESS_SERVER, url=self.mcp_url, headers=[])]
        loads = bool(getattr(init.agent_capabilities, "load_session", False))
        if self.resumed and not self.resume_id:
            self.not_loaded = "there is no session of it to load here (a fork starts anew at its step)"
        if self.resume_id and not loads:
            self.not_loaded = "it offers no session/load"
        if self.resume_id and loads:
            self._replaying = True  # session/load replays the conversation as updates: history, not new calls
            try:
                await self._conn.load_session(
                    cwd=self.workdir, session_id=self.resume_id, mcp_servers=servers, **self.session_meta
                )
                self.session_id, self.loaded = self.resume_id, True  # replaying until the first prompt
            except Exception as error:  # noqa: BLE001 - an agent that lost its session starts anew, said so
                detail = getattr(error, "data", None)
                detail = detail.get("details") if isinstance(detail, dict) else detail
                self.not_loaded = f"its session/load answered {type(error).__name__}: {detail or error}"[:300]
                self._replaying = False
        if self.session_id is None:
            made = await self._unless_exited(
                self._conn.new_session(cwd=self.workdir, mcp_servers=servers, **self.session_meta)
            )
            self.session_id = made.session_id
        self.on_session(self.session_id)

    async def _unless_exited(self, request: Any) -> Any:
        """request's answer; RuntimeError as soon as the agent's process ends first."""
        assert self._process is not None
        asked, ended = asyncio.ensure_future(request), asyncio.ensure_future(self._process.wait())
        await asyncio.wait({asked, ended}, return_when=asyncio.FIRST_COMPLETED)
        if asked.done():
            ended.cancel()
            return asked.result()
        asked.cancel()
        raise RuntimeError(f"the agent's process ended (exit {self._process.returncode})")

    def prompt(self, text: str, task: str = "") -> None:
        """A prompt turn (returns at once) with the conversation's newest user message. The first of a
        new session carries how to work here; after harness resumed or forked the run, it says so, and a
        new session (one that did not load its earlier one) gets the task as well as the newest message."""
        if self._prompts == 0 and self.loaded:
            text = RESUMED + text
        elif self._prompts == 0:
            body = text if not task or task.strip() == text.strip() else f"{task}\n\n{text}"
            text = (CONTINUED if self.resumed else "") + body + GUIDANCE
        elif self.refusals:
            refused, self.refusals = self.refusals, []
            text = "".join(f"{line}\n" for line in refused) + "\n" + text
        self._prompts += 1
        asyncio.run_coroutine_threadsafe(self._prompt(text), self._loop)

    async def _prompt(self, text: str) -> None:
        from acp import schema

        self._replaying = False
        try:
            answer = await self._conn.prompt(
                session_id=self.session_id, prompt=[schema.TextContentBlock(type="text", text=text)]
            )
        except Exception as error:  # noqa: BLE001 - the agent or its connection failed: the loop hears it
            self.turns.fail(ModelUnavailable(f"the hosted agent failed: {type(error).__name__}: {error}"[:500]))
            return
        await asyncio.to_thread(self.settled, 10.0)  # the last answer's usage is the turn's
        self.turns.ended(str(answer.stop_reason))

    def cancel(self) -> None:
        if self._conn is not None and self.session_id is not None:
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self._conn.cancel(session_id=self.session_id), self._loop).result(5)

    def close(self) -> None:
        """Cancel what runs, end the bridge (the container is stopped by its owner) and the loop."""
        if not self._thread.is_alive():
            return
        self.cancel()
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self._loop.close()

    async def _shutdown(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close()
        if self._process is not None and self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._process.kill()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._process.wait(), 5)
        pending = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    # --- what the agent asks and tells -------------------------------------------------------

    def permission(self, tool_call: Any) -> bool:
        """harness's answer to the agent's request to make a call of its own."""
        call = self._remember(tool_call)
        if call.harness_tool is not None:
            return True  # the loop gates it when it runs
        request = gate_request(call, self.workdir)
        if request is None:
            allowed, why = False, f"{call.name} is not for a hosted agent"
            call.decision = Decision(action="deny", rule="hosted-agent", reason=why)
        else:
            allowed, why, call.decision = self.decide(request, call.name, call.arguments)
        if not allowed:  # a step of its own now: an agent may end its turn on a refusal, reporting nothing
            call.reported = True
            refusal = f"harness refused {call.name} {', '.join(request.paths) if request else ''}".rstrip()
            self.refusals.append(f"{refusal}: {why}")
            self.turns.reported(
                str(tool_call.tool_call_id), call.name, call.arguments or self._where(call),
                Report(text=f"{refusal}: {why}", is_error=True, decision=call.decision),
            )  # fmt: skip
        return allowed

    def update(self, update: Any) -> None:
        """One `session/update`: words, and calls as they start and end (none while a loaded session
        replays its history). An agent may send its replay after its answer to session/load: until the
        first prompt goes out, what comes is history; a call the record already holds is history whenever
        its update comes."""
        kind = getattr(update, "session_update", "")
        if kind in ("tool_call", "tool_call_update") and (self._replaying or str(update.tool_call_id) in self.recorded):
            self._remember(update).reported = True
            return
        if self._replaying:
            return
        if kind in ("agent_message_chunk", "agent_thought_chunk"):
            text = getattr(getattr(update, "content", None), "text", None)
            if isinstance(text, str):
                (self.turns.say if kind == "agent_message_chunk" else self.turns.think)(text)
        elif kind == "plan":
            entries = [
                f"- [{getattr(entry, 'status', '')}] {getattr(entry, 'content', '')}"
                for entry in getattr(update, "entries", None) or ()
            ]
            self.turns.think("\n".join(["Plan:", *entries]) + "\n")
        elif kind in ("tool_call", "tool_call_update"):
            call = self._remember(update)
            status = getattr(update, "status", None)
            if status in ("completed", "failed") and call.harness_tool is None and not call.reported:
                call.reported = True
                self.turns.reported(
                    update.tool_call_id,
                    call.name,
                    call.arguments or self._where(call),
                    Report(
                        text=_report_text(update, status) or f"{call.name}: {status}",
                        is_error=status == "failed",
                        wrote=call.name in WRITERS | SHELLS or call.kind in ("edit", "delete", "move", "execute"),
                        decision=call.decision,
                    ),
                )

    def _where(self, call: _Call) -> dict[str, Any]:
        """The arguments of a call the agent gave none of: the paths it touches, if it named them."""
        return {"paths": [workspace_path(path, self.workdir) for path in call.locations]} if call.locations else {}

    def _remember(self, tool_call: Any) -> _Call:
        ident = str(tool_call.tool_call_id)
        call = self._calls.setdefault(ident, _Call(name=""))
        meta = getattr(tool_call, "field_meta", None) or {}
        named = (meta.get("claudeCode") or {}).get("toolName") if isinstance(meta, dict) else None
        by_id = TOOL_ID.match(ident)
        title = str(getattr(tool_call, "title", None) or "")
        first = title.split(" ", 1)[0].rstrip(":")
        call.name = str(named or call.name or (by_id.group(1) if by_id else first) or "tool")
        raw = getattr(tool_call, "raw_input", None)
        if isinstance(raw, dict) and raw:
            call.arguments = {k: v for k, v in raw.items() if k not in BOOKKEEPING}
        prefix = next((p for p in MCP_PREFIXES if call.name.startswith(p)), None)
        if prefix is not None:
            call.harness_tool = call.name[len(prefix) :]
        elif isinstance(raw, dict) and raw.get("server") == HARNESS_SERVER and isinstance(raw.get("tool"), str):
            call.harness_tool = raw["tool"]
        call.kind = str(getattr(tool_call, "kind", None) or call.kind)
        places = [str(getattr(place, "path", "") or "") for place in getattr(tool_call, "locations", None) or ()]
        call.locations = tuple(dict.fromkeys([*call.locations, *(p for p in places if p)]))
        return call

    # --- terminals: the loop's run_command ---------------------------------------------------

    def create_terminal(self, command: str, args: Sequence[str]) -> str:
        ident = f"term_{len(self._terminals) + 1}"
        line = shlex.join([command, *args]) if args else command
        call_id = self._calls_of[ident] = f"{ident}_{uuid.uuid4().hex[:12]}"

        def run() -> None:
            record = self.turns.call("run_command", {"command": line}, call_id=call_id)
            text = record.text if record is not None else "harness did not run this command: the run ended"
            code = record.envelope.exit_code if record is not None and record.envelope is not None else None
            self._outputs[ident] = (text, code)
            stopping.forget(call_id)  # a kill that came as it ended stops nothing later

        thread = threading.Thread(target=run, name=f"harness-{ident}", daemon=True)
        self._terminals[ident] = thread
        thread.start()
        return ident

    def terminal_result(self, ident: str, wait: bool) -> tuple[str, int | None, bool]:
        """(output so far, exit code, ended) of a terminal; wait: until it ended."""
        thread = self._terminals.get(ident)
        if thread is not None and wait:
            thread.join()
        text, code = self._outputs.get(ident, ("", None))
        return text, code, ident in self._outputs

    def kill_terminal(self, ident: str, why: str) -> None:
        """Stop a terminal's command if it still runs (or has yet to start): its container is killed and
        its record says so (exit 137 and why, sandbox.stopping). An ended one is left as it is."""
        call_id = self._calls_of.get(ident)
        if call_id is None or ident in self._outputs:
            return
        self._killed.add(ident)
        stopping.stop(call_id, why)

    def killed(self, ident: str) -> bool:
        """Whether the agent stopped this terminal's command before it ended by itself."""
        return ident in self._killed


def gate_request(call: _Call, workdir: str) -> GateRequest | None:
    """What the gate is asked of an agent's own call, as of the harness tool it stands for, on every path
    it names (its arguments' paths, the files a patch changes, the locations it gave)."""
    named = [call.arguments.get(key) for key in ("file_path", "notebook_path", "path", "filePath")]
    changes = call.arguments.get("changes")
    named += list(changes) if isinstance(changes, dict) else []
    found = [str(path) for path in [*named, *call.locations] if isinstance(path, str) and path]
    paths = tuple(dict.fromkeys(workspace_path(path, workdir) for path in found)) or (".",)
    if call.name in SHELLS or call.kind == "execute":
        return GateRequest(tool="run_command", tier="exec", command=_command_of(call.arguments))
    if call.name in WRITERS or call.kind in ("edit", "delete", "move"):
        return GateRequest(tool="write_file" if call.name == "Write" else "apply_patch", tier="write", paths=paths)
    if call.name in READERS or call.kind in ("read", "search"):
        return GateRequest(tool=READERS.get(call.name, "read_file"), tier="read", paths=paths)
    if call.name in ("TodoWrite", "ExitPlanMode") or call.kind == "think":
        return GateRequest(tool="list_dir", tier="read", paths=(".",))  # nothing outside the agent itself
    return None


def _command_of(arguments: dict[str, Any]) -> str:
    """The command line of an agent's shell call: its `command` as given, a shell's `-c` script as the
    command it runs (Codex gives ["bash", "-lc", SCRIPT]), an argv joined as a shell would read it."""
    command = arguments.get("command") or arguments.get("cmd") or ""
    if isinstance(command, list):
        words = [str(word) for word in command]
        if len(words) == 3 and PurePosixPath(words[0]).name in ("bash", "sh", "zsh") and words[1] in ("-c", "-lc"):
            return words[2]
        return shlex.join(words)
    return str(command)


def workspace_path(path: str, workdir: str) -> str:
    """An agent's path as harness's tools take it: relative to the workspace (an absolute path outside
    it is kept, and refused as such)."""
    pure = PurePosixPath(path)
    if pure.is_absolute():
        try:
            return str(pure.relative_to(workdir)) or "."
        except ValueError:
            return path  # outside the workspace: the gate refuses it as such
    return path


def _report_text(update: Any, status: str) -> str:
    """What the agent reported of a call it made itself: its content, and on failure what its output
    said first."""
    said = _content_text(update, failed=status == "failed")
    if status != "failed":
        return said
    raw = getattr(update, "raw_output", None)
    if isinstance(raw, dict):
        raw = raw.get("stderr") or raw.get("output") or raw.get("error") or raw.get("stdout")
    failure = str(raw).strip() if raw else ""
    return "\n".join(part for part in (f"failed: {failure}" if failure else "failed", said) if part)


def _content_text(update: Any, failed: bool = False) -> str:
    parts = []
    for item in getattr(update, "content", None) or ():
        inner = getattr(item, "content", None)
        text = getattr(inner, "text", None)
        if isinstance(text, str):
            parts.append(text)
        elif getattr(item, "type", "") == "diff":
            parts.append(f"{'did not edit' if failed else 'edited'} {getattr(item, 'path', '')}")
    return "\n".join(parts)


class _Client:
    """The ACP Client the SDK calls (its async methods hand the work to HostedSession)."""

    def __init__(self, session: HostedSession) -> None:
        self.session = session

    async def request_permission(self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any) -> Any:
        from acp import schema

        allowed = await asyncio.get_running_loop().run_in_executor(None, self.session.permission, tool_call)
        wanted = ("allow_once", "allow_always") if allowed else ("reject_once", "reject_always")
        chosen = next((o for kind in wanted for o in options if o.kind == kind), None)
        if chosen is None:
            return schema.RequestPermissionResponse(outcome=schema.DeniedOutcome(outcome="cancelled"))
        return schema.RequestPermissionResponse(
            outcome=schema.AllowedOutcome(outcome="selected", option_id=chosen.option_id)
        )

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.session.update(update)

    async def create_terminal(self, session_id: str, command: str, args: list[str] | None = None, **kwargs: Any) -> Any:
        from acp import schema

        return schema.CreateTerminalResponse(terminal_id=self.session.create_terminal(command, args or []))

    async def terminal_output(self, session_id: str, terminal_id: str, **kwargs: Any) -> Any:
        from acp import schema

        text, code, ended = self.session.terminal_result(terminal_id, wait=False)
        status = schema.TerminalExitStatus(**self._exit(terminal_id, code)) if ended else None
        return schema.TerminalOutputResponse(output=text, truncated=False, exit_status=status)

    def _exit(self, terminal_id: str, code: int | None) -> dict[str, Any]:
        """A terminal's exit as ACP says it: a command the agent killed ended by SIGKILL, with no code."""
        if self.session.killed(terminal_id) and code in (137, None):
            return {"exit_code": None, "signal": "SIGKILL"}
        return {"exit_code": code}

    async def wait_for_terminal_exit(self, session_id: str, terminal_id: str, **kwargs: Any) -> Any:
        from acp import schema

        loop = asyncio.get_running_loop()
        _, code, _ = await loop.run_in_executor(None, self.session.terminal_result, terminal_id, True)
        return schema.WaitForTerminalExitResponse(**self._exit(terminal_id, code))

    async def kill_terminal(self, session_id: str, terminal_id: str, **kwargs: Any) -> Any:
        self.session.kill_terminal(terminal_id, "the agent killed its terminal")
        return None

    async def release_terminal(self, session_id: str, terminal_id: str, **kwargs: Any) -> Any:
        self.session.kill_terminal(terminal_id, "the agent released its terminal while the command ran")
        return None

    async def read_text_file(
        self, session_id: str, path: str, line: int | None = None, limit: int | None = None, **kwargs: Any
    ) -> Any:
        from acp import schema

        text = await self._files(lambda files: files.read(path, line, limit))
        return schema.ReadTextFileResponse(content=text)

    async def write_text_file(self, session_id: str, path: str, content: str, **kwargs: Any) -> Any:
        from acp import schema

        await self._files(lambda files: files.write(path, content))
        return schema.WriteTextFileResponse()

    async def _files(self, use: Callable[[Files], Any]) -> Any:
        """A file-system request served by the session's Files in a worker thread (each runs a
        container); an error the agent reads when refused."""
        from acp import RequestError

        files = self.session.files
        if files is None:
            raise RequestError.internal_error({"message": "harness serves no file system to this session yet"})
        try:
            return await asyncio.get_running_loop().run_in_executor(None, use, files)
        except FileRefused as refused:
            raise RequestError.invalid_params({"message": str(refused)}) from None

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        return {}

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None
