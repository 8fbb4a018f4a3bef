"""The composition root of a hosted agent's run (`--agent NAME`): its image, its endpoint (the model
gateway and harness's tools as MCP on one socket), its container, its ACP session, and the provider the
loop asks for turns (harness.agent.external). The loop itself is the same loop as harness's own model's:
the same gate, hooks, sandbox, records, snapshots, verification, budget and outcomes.

`hosted(...)` yields nothing for a run of harness's own model.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.agent.external import ExternalTurns, Reported
from harness.assembly import engine
from harness.config import RunConfig
from harness.errors import HarnessError, ModelUnavailable
from harness.policy.decision import Decision
from harness.policy.gate import GateRequest
from harness.trajectory import EventRecord
from harness.types import Usage
from sandbox.durable import write_text_atomic
from sandbox.errors import SandboxError
from sandbox.spec import Mount

if TYPE_CHECKING:
    from harness.agent.budget import Budget
    from harness.agent.hosted import HostedSession
    from harness.agent.loop import Agent
    from harness.assembly.runtime import Runtime
    from harness.providers.config import ProviderConfig
    from harness.providers.gateway import Gateway
    from harness.tools.registry import ToolContext
    from sandbox.session.session import Session

RECORD = "agent.json"
"""The session folder's record of its hosted agent (which one, its ACP session id to load after a crash)."""


@dataclass
class WorkspaceFiles:
    """A hosted agent's `fs/*` requests, served through the sandbox and never from this machine's disk:
    a read is asked of the gate and run in a fresh container (the runner's raw read), a write is
    harness's `write_file`, gated, hooked and recorded as a step of the loop."""

    context: ToolContext
    turns: ExternalTurns
    workdir: str

    def read(self, path: str, line: int | None, limit: int | None) -> str:
        from harness.agent.hosted import FileRefused, workspace_path
        from harness.tools.calls import call_runner

        relative = workspace_path(path, self.workdir)
        decision = self.context.gate.check(GateRequest(tool="read_file", tier="read", paths=(relative,)))
        if decision.action != "allow":
            raise FileRefused(f"harness refused reading {relative}: {decision.reason}")
        try:
            answer, _ = call_runner(self.context, "read_raw", {"path": relative, "line": line, "limit": limit})
        except (HarnessError, SandboxError) as error:
            raise FileRefused(f"harness could not read {relative}: {error}") from None
        return str(answer.get("text") or "")

    def write(self, path: str, content: str) -> None:
        from harness.agent.hosted import FileRefused, workspace_path

        relative = workspace_path(path, self.workdir)
        record = self.turns.call("write_file", {"path": relative, "content": content, "overwrite": True})
        if record is None:
            raise FileRefused(f"harness did not write {relative}: the run ended")
        if record.is_error:
            raise FileRefused(record.text)


@dataclass
class Hosted:
    """A hosted agent's run while it lasts: the loop's provider, and what joins the loop to it."""

    name: str
    turns: ExternalTurns
    session: HostedSession
    gateway: Gateway
    started_ms: int
    """How long its container, its ACP `initialize` and its session (new or loaded) took to start."""

    def attach(self, agent: Agent) -> None:
        """Join the built loop: its registry records the agent's own calls, its trajectory tells the
        provider each record, its gate (and hooks) answers the agent's permission requests."""
        agent.registry = Reported(agent.registry, self.turns)
        agent.trajectory.add_observer(self.turns)
        agent.keep_workspace = True
        gate, hooks, trajectory = agent.tool_context.gate, agent.hooks, agent.trajectory
        self.gateway.refusal = self._spent_out(agent.budget)
        trajectory.append(
            EventRecord(event="agent_started", detail=f"{self.name} started in {self.started_ms} ms "
                        "(its container, ACP initialize, its session)"),
        )  # fmt: skip
        if self.session.resumed:  # after a crash or a fork: said which way the agent went on
            detail = (
                f"{self.name} went on from its session {self.session.session_id} (session/load)"
                if self.session.loaded
                else f"{self.name} does not go on from an earlier session ({self.session.not_loaded}): a new "
                "session of it starts on the workspace of the last step, told the task"
            )
            trajectory.append(EventRecord(event="agent_session", detail=detail), durable=True)

        def decide(request: GateRequest, name: str, arguments: dict[str, Any]) -> tuple[bool, str, Decision | None]:
            decision = gate.check(request)
            if decision.action == "ask":  # nobody is asked mid-call: an ask rule denies here
                decision = Decision(action="deny", rule=decision.rule, reason=decision.reason + "; nobody to ask")
            if decision.action != "allow":
                return False, decision.reason, decision
            if hooks is not None and hooks.wanted("PreToolUse", request.tool):
                payload = {"tool_name": request.tool, "tool_input": arguments, "tool_use_id": f"agent-{name}"}
                outcome = hooks.run("PreToolUse", payload)
                for record in outcome.records:
                    trajectory.append(record, durable=True)
                if outcome.blocked:
                    return False, outcome.reason, decision
            return True, "", decision

        self.session.decide = decide
        self.session.files = WorkspaceFiles(agent.tool_context, self.turns, self.session.workdir)

    def _spent_out(self, budget: Budget) -> Callable[[], str | None]:
        """The gateway's refusal: once the run's tokens or cost are spent (what the loop billed and what
        it has yet to bill), no model request goes on; the first refused one cancels the agent's prompt
        (session/cancel), and the loop's next turn ends the run at its limit (its container stopped).
        A turn's traffic moves from the provider's unbilled tally to the budget in two steps, so the spend
        is also read as what the budget held when the agent started plus all it has been charged since:
        the larger of the two never misses a bill in between, nor counts one twice."""
        told = threading.Event()
        before, (charged_before, cost_before) = budget.spent(), self.turns.charged()

        def refusal() -> str | None:
            usage, cost = self.turns.unbilled()
            spent, limits = budget.spent(), budget.limits
            charged, charged_cost = self.turns.charged()
            tokens = max(
                spent.tokens + usage.input_tokens + usage.output_tokens,
                before.tokens + _tokens(charged) - _tokens(charged_before),
            )
            usd = max(spent.cost_usd + cost, before.cost_usd + charged_cost - cost_before)
            why = None
            if limits.max_tokens is not None and tokens >= limits.max_tokens:
                why = f"the run's token budget is spent ({tokens} of {limits.max_tokens})"
            elif limits.max_cost_usd is not None and usd >= limits.max_cost_usd:
                why = f"the run's cost budget is spent (${usd:.4f} of ${limits.max_cost_usd:.4f})"
            if why is not None and not told.is_set():
                told.set()
                threading.Thread(target=self.session.cancel, name="harness-budget-cancel", daemon=True).start()
            return None if why is None else f"harness refused this model request: {why}"

        return refusal


def _tokens(usage: Usage) -> int:
    return usage.input_tokens + usage.output_tokens


@contextlib.contextmanager
def hosted(
    config: RunConfig, session: Session, runtime: Runtime, settings: ProviderConfig, *, resumed: bool
) -> Iterator[Hosted | None]:
    """A hosted agent's run pieces, started, then ended with the run (None: harness's own model)."""
    if not config.agent:
        yield None
        return
    from harness.agent.endpoint import AgentEndpoint
    from harness.agent.hosted import HostedSession  # ACP's SDK and asyncio: a hosted run's alone
    from harness.environment.agents import AGENT_HOME, GATEWAY_DIR, GATEWAY_PORT, PLACEHOLDER_KEY, agent_named
    from harness.providers.gateway import MOUNT, Gateway
    from harness.providers.pricing import PriceTable
    from harness.providers.vendor import ModelSpec
    from harness.tools import builtin
    from harness.tools.calls import read_only_mounts
    from harness.tools.mcp_serve import tools_server
    from sandbox.owner import hand_over

    agent = agent_named(config.agent).with_shell(config.agent_shell)
    model = ModelSpec.of(config.model)
    turns = ExternalTurns(model=config.model or agent.name)
    gateway = Gateway(
        agent.protocol, settings.base_url, runtime.api_key, prices=PriceTable(settings.prices, vendor=model.prefix),
        on_usage=lambda exchange: turns.charge(exchange.usage, exchange.cost_usd, exchange.cost_known),
    )  # fmt: skip
    menu = [s for s in builtin.default_registry().schemas() if s.name in agent.mcp_tools]
    tools = tools_server(menu, turns.call, why_not=lambda: "the run ended", structured=False)
    with contextlib.ExitStack() as stack:
        endpoint = AgentEndpoint(gateway, tools).start()
        stack.callback(endpoint.close)
        home = session.dir / "agent-home"
        home.mkdir(exist_ok=True)
        hand_over(home)
        mounts = [
            Mount(source=endpoint.folder, target=GATEWAY_DIR),
            Mount(source=home, target=AGENT_HOME, read_only=False),
        ]
        mounts += _mounted_files(session.dir / "agent-files", agent.mounted)
        mounts += read_only_mounts(session.workspace, config.gate.read_only_paths)  # as in every tool container
        image = engine.agent_image(runtime.docker_host, agent.name, config.image)
        started = time.monotonic()
        spec = session.spec.model_copy(
            update={"image": image, "memory": "2g", "pids": 1024, "egress": None, "network": "none"}
        )
        environment = {
            **agent.variables(model.target),
            "HOME": AGENT_HOME,
            agent.key_env: PLACEHOLDER_KEY,
            "NO_PROXY": "127.0.0.1,localhost",
        }
        if agent.base_url_env:
            environment[agent.base_url_env] = f"http://127.0.0.1:{GATEWAY_PORT}{MOUNT}"
        if model.target and agent.model_env:
            environment[agent.model_env] = model.target
        container = engine.start_agent(
            runtime.docker_host, runtime.run_id, spec, agent.argv(model.target), session.workspace,
            environment=environment,
            mounts=mounts,
            relay=(GATEWAY_PORT, f"{GATEWAY_DIR}/{endpoint.socket.name}"),
        )  # fmt: skip
        stack.callback(container.stop)
        record = session.dir / RECORD
        earlier = _read(record) if resumed else {}
        acp = HostedSession(
            container.bridge, turns, workdir=session.spec.workdir, mcp_url=f"http://127.0.0.1:{GATEWAY_PORT}/mcp",
            session_meta=agent.session_meta, decide=lambda *_: (False, "not ready", None),
            resume_id=str(earlier.get("acp_session") or "") or None, resumed=resumed,
            recorded=_reported_calls(session.dir) if resumed else frozenset(),
            on_session=lambda sid: write_text_atomic(record, json.dumps({"agent": agent.name, "acp_session": sid})),
            settled=gateway.settled,
        )  # fmt: skip
        stack.callback(acp.close)
        stack.callback(turns.close)
        try:
            acp.start()
        except Exception as error:  # noqa: BLE001 - what the agent's side said, in one line
            said = " ".join(container.logs()[-600:].split())
            raise ModelUnavailable(
                f"the hosted agent {agent.name} did not start ({type(error).__name__}: {error}); "
                f"its output: {said or 'none'}"
            ) from None
        turns.prompter = acp
        yield Hosted(agent.name, turns, acp, gateway, int((time.monotonic() - started) * 1000))


def _mounted_files(folder: Path, files: dict[str, str]) -> list[Mount]:
    """The files mounted read-only over an agent image's (its own shell's settings), written to folder."""

    mounts = []
    folder.mkdir(exist_ok=True)
    for n, (target, content) in enumerate(sorted(files.items())):
        source = folder / f"file{n}"
        write_text_atomic(source, content)
        source.chmod(0o644)
        mounts.append(Mount(source=source, target=target))
    return mounts


def _reported_calls(folder: Path) -> frozenset[str]:
    """The agent's ids of the calls of its own the run's record holds (recorded as `<id>.<n>`)."""
    from harness.agent.external import REPORTED
    from harness.trajectory import ToolRecord, read_records

    return frozenset(
        record.call_id.rsplit(".", 1)[0]
        for record in read_records(folder)
        if isinstance(record, ToolRecord) and record.name.startswith(REPORTED)
    )


def _read(path: Path) -> dict[str, Any]:
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}
