"""ATIF, the Agent Trajectory Interchange Format (Harbor's RFC 0001), out of a harness session and
into harness's trajectory page.

Out (`to_atif`): the session's trajectory as ATIF-v1.7. The system prompt and every user message
the controller sent (the task, verify feedback, a resume's note) are `system`/`user` steps, in the
order they were first sent (a message sent again after a resume or a context summary is not a new
step); each model turn is an `agent` step with its text, reasoning, tool calls (parallel calls are
one step), their results as the observation (a refused call's result says so: `extra.refused`),
and its metrics (prompt, completion, cached tokens, cost; reasoning and cache-write tokens, latency
and retries in `extra`). A verify round is a `system` step whose observation is the verify
command's output. The session's identity, repository, image and outcome are in `extra`.

In (`to_view`): any ATIF document (from Harbor, NeMo Relay or another agent) as the SessionView
the trajectory page renders: each agent step a step with its turn and calls.

Plain pydantic and the standard library: Harbor's own validator checks what `to_atif` writes in the
tests, and nothing here imports Harbor.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, get_args

from harness.errors import UsageError
from harness.policy.gate import Decision
from harness.report.session_view import SessionView, StepView
from harness.trajectory import (
    EVERY_AGENT,
    DelegateRecord,
    EventRecord,
    HookRecord,
    OutcomeRecord,
    RequestRecord,
    StartRecord,
    StepRecord,
    SummaryRecord,
    ToolRecord,
    TurnRecord,
    VerifyRecord,
    read_records,
)
from harness.types import Message, ModelTurn, Reasoning, StopReason, ToolCall, ToolSchema, Usage
from harness.version import harness_version
from sandbox.envelope import Envelope

SCHEMA = "ATIF-v1.7"
KNOWN = tuple(f"ATIF-v1.{minor}" for minor in range(10))


def to_atif(session_dir: Path, info: dict[str, Any] | None = None, tools: Sequence[ToolSchema] = ()) -> dict[str, Any]:
    """The session's trajectory as one ATIF document (a dict ready for json.dumps); tools: the menu's
    schemas, written as the agent's tool definitions (else only the names the requests carried)."""
    every = read_records(session_dir, EVERY_AGENT)
    records = [r for r in every if r.agent is None]
    writer = _Writer({schema.name: schema for schema in tools})
    view = _view_of(Path(session_dir))
    writer.diffs = {step.step: (step.diff, step.diff_note) for step in view.steps if step.diff or step.diff_note}
    start = next((r for r in records if isinstance(r, StartRecord)), None)
    session_id = Path(session_dir).name
    outcome = _write(writer, every, None, session_id)

    facts = dict(info or {})
    extra: dict[str, Any] = {"harness_session": session_id}
    for key in ("repo", "created", "origin"):
        if facts.get(key) is not None:
            extra[key] = facts[key]
    spec = facts.get("spec") or {}
    if isinstance(spec, dict) and spec.get("image"):
        extra["image"] = spec["image"]
    if start is not None:
        extra["task"] = start.task
        extra["model"] = start.model
        extra["started"] = _iso(start.ts)  # the run's own start (its first step comes a moment later)
    if outcome is not None:
        extra["outcome"] = {"outcome": outcome.outcome, "detail": outcome.detail, "exit_code": outcome.exit_code}
    extra["patch"] = view.patch
    if view.family:
        extra["family"] = [
            {"session_id": r.session_id, "folder": str(r.folder), "at": r.at, "outcome": r.outcome, "depth": r.depth}
            for r in view.family
        ]
    if view.problems:
        extra["problems"] = view.problems
    config = start.config if start is not None else {}
    hosted = config.get("agent") if isinstance(config.get("agent"), str) else None
    if hosted:  # an agent harness hosted (docs/agents.md): its name; the run is harness's
        extra["hosted_by"] = "harness"
        extra["agent_shell"] = config.get("agent_shell") or "harness"
    document: dict[str, Any] = {
        "schema_version": SCHEMA,
        "session_id": session_id,
        "trajectory_id": session_id,
        "agent": {
            "name": hosted or "harness",
            "version": harness_version(),
            **({"model_name": start.model} if start is not None and start.model else {}),
            **({"tool_definitions": writer.tools} if writer.tools else {}),
        },
        "steps": writer.steps,
        "final_metrics": writer.final_metrics(),
        "extra": extra,
    }
    if writer.subagents:
        document["subagent_trajectories"] = writer.subagents
    if outcome is not None and outcome.detail:
        document["notes"] = f"{outcome.outcome}: {outcome.detail}"
    return document


def _write(writer: _Writer, every: list[Any], agent: str | None, root: str) -> OutcomeRecord | None:
    """Write one agent's records (a sub-agent's as an embedded trajectory, referenced from the result
    of the delegate call that started it); its outcome record."""
    outcome: OutcomeRecord | None = None
    for record in every:
        if record.agent != agent:
            continue
        if isinstance(record, RequestRecord):
            writer.request(record)
        elif isinstance(record, TurnRecord):
            writer.turn(record)
        elif isinstance(record, ToolRecord):
            writer.tool(record)
        elif isinstance(record, VerifyRecord):
            writer.verify(record)
        elif isinstance(record, StartRecord) and record.resumed:
            writer.system(f"resumed ({record.model})", record.ts, {"harness_kind": "resume"})
        elif isinstance(record, EventRecord):
            writer.event(record)
        elif isinstance(record, HookRecord):
            writer.hook(record)
        elif isinstance(record, SummaryRecord):
            writer.summary(record)
        elif isinstance(record, StepRecord):
            writer.committed(record)
        elif isinstance(record, DelegateRecord) and record.phase == "end":
            writer.subagents.append(_subagent(every, record, root))
            writer.delegated[record.call_id] = record
            writer.add_totals(writer.subagents[-1]["final_metrics"])
        elif isinstance(record, OutcomeRecord):
            outcome = record
    return outcome


def _subagent(every: list[Any], end: DelegateRecord, root: str) -> dict[str, Any]:
    """A sub-agent's trajectory, embedded in its parent's (`trajectory_id` ROOT/NAME)."""
    writer = _Writer({})
    _write(writer, every, end.child, root)
    document: dict[str, Any] = {
        "schema_version": SCHEMA,
        "session_id": end.session,
        "trajectory_id": f"{root}/{end.child}",
        "agent": {"name": f"harness {end.child}", "version": harness_version()},
        "steps": writer.steps
        or [{"step_id": 1, "timestamp": _iso(end.ts), "source": "system", "message": "(no step recorded)"}],
        "final_metrics": writer.final_metrics(),
        "notes": f"{end.outcome}: {end.detail}" if end.detail else end.outcome,
        "extra": {
            "harness_session": end.session,
            "task": end.task,
            "outcome": end.outcome,
            "change": end.change,
            "paths": end.paths,
            "conflicts": end.conflicts,
            "reserve": end.reserve,
        },
    }
    if writer.subagents:
        document["subagent_trajectories"] = writer.subagents
    return document


class _Writer:
    def __init__(self, schemas: dict[str, ToolSchema]) -> None:
        self._schemas = schemas
        self.steps: list[dict[str, Any]] = []
        self.tools: list[dict[str, Any]] = []
        self._sent: list[Message] = []
        self._open: dict[str, Any] | None = None
        """The agent step whose calls' results are still coming."""
        self._totals = Usage()
        self._cost = 0.0
        self._cost_known = True
        self._estimated = 0
        """The last request's estimated prompt size (what a turn without reported usage sent)."""
        self.diffs: dict[int, tuple[str, str]] = {}
        """Each run step's change (diff, note), from the snapshot store."""
        self.subagents: list[dict[str, Any]] = []
        """The embedded trajectories of this agent's sub-agents."""
        self.delegated: dict[str, DelegateRecord] = {}
        """Each ended sub-agent by the call id that started it."""

    def _add(self, step: dict[str, Any]) -> dict[str, Any]:
        step["step_id"] = len(self.steps) + 1
        self.steps.append({"step_id": step.pop("step_id"), **step})
        return self.steps[-1]

    def request(self, record: RequestRecord) -> None:
        """The messages first sent in this request: the system prompt and user messages become steps;
        a message sent again (after a resume or a summary) is not new."""
        self._estimated = record.estimated_tokens
        before = self._sent[record.base :]
        self._sent = self._sent[: record.base] + list(record.messages)
        again = list(before)
        for message in record.messages:
            if message in again:
                again.remove(message)
                continue
            if message.role in ("system", "user"):
                self._open = None
                self._add(
                    {"timestamp": _iso(record.ts), "source": message.role, "message": message.content or "(empty)"}
                )
        if not self.tools and record.tools:
            self.tools = [
                self._schemas[name].openai()
                if name in self._schemas
                else {"type": "function", "function": {"name": name}}
                for name in record.tools
            ]

    def turn(self, record: TurnRecord) -> None:
        turn = record.turn
        step: dict[str, Any] = {
            "timestamp": _iso(record.ts),
            "source": "agent",
            "message": turn.text or "",
            "llm_call_count": 1,
            "extra": {
                "harness_step": record.step,
                "stop_reason": turn.stop_reason,
                "sent_tokens": turn.usage.input_tokens or self._estimated,
            },
        }
        if turn.model:
            step["model_name"] = turn.model
        if turn.reasoning is not None and turn.reasoning.text:
            step["reasoning_content"] = turn.reasoning.text
        if turn.tool_calls:
            step["tool_calls"] = [
                {"tool_call_id": call.id, "function_name": call.name, "arguments": call.arguments}
                for call in turn.tool_calls
            ]
        usage = turn.usage
        metrics: dict[str, Any] = {
            "prompt_tokens": usage.input_tokens,
            "completion_tokens": usage.output_tokens,
            "cached_tokens": usage.cached_input_tokens,
            "extra": {
                "reasoning_tokens": usage.reasoning_tokens,
                "cache_write_tokens": usage.cache_write_tokens,
                "latency_ms": turn.latency_ms,
                "retries": turn.retries,
            },
        }
        if turn.cost_known:
            metrics["cost_usd"] = turn.cost_usd
        step["metrics"] = metrics
        if turn.refusal:
            step["extra"]["refusal"] = turn.refusal
        self._totals = self._totals + usage
        self._cost += turn.cost_usd
        self._cost_known = self._cost_known and turn.cost_known
        self._open = self._add(step)

    def tool(self, record: ToolRecord) -> None:
        step = self._open
        ids = {call["tool_call_id"] for call in (step or {}).get("tool_calls", [])}
        extra: dict[str, Any] = {"duration_ms": record.duration_ms, "wrote": record.wrote}
        if record.is_error:
            extra["error_kind"] = record.error_kind
        if record.decision is not None:
            extra["gate"] = record.decision.action
            extra["decision"] = record.decision.model_dump(mode="json")
            if record.decision.action != "allow":
                extra["refused"] = True
                extra["rule"] = record.decision.rule
        if record.envelope is not None:
            extra["exit_code"] = record.envelope.exit_code
            extra["status"] = record.envelope.status
            extra["envelope"] = record.envelope.model_dump(mode="json")
        if record.attempt:
            extra["attempt"] = record.attempt
        result: dict[str, Any] = {"source_call_id": record.call_id, "content": record.text, "extra": extra}
        ended = self.delegated.get(record.call_id)
        if ended is not None:
            result["subagent_trajectory_ref"] = [
                {"trajectory_id": self.subagents[list(self.delegated).index(record.call_id)]["trajectory_id"],
                 "session_id": ended.session}
            ]  # fmt: skip
        if step is None or record.call_id not in ids:  # a call no open turn asked for (a re-issued one)
            self._add(
                {
                    "timestamp": _iso(record.ts),
                    "source": "system",
                    "message": f"tool {record.name} ({record.call_id})",
                    "observation": {"results": [{**result, "source_call_id": None}]},
                    "extra": {"harness_kind": "tool", "arguments": record.arguments},
                }
            )
            return
        step.setdefault("observation", {"results": []})["results"].append(result)

    def verify(self, record: VerifyRecord) -> None:
        self._open = None
        verdict = "passed" if record.passed else f"failed (exit {record.exit_code}, {record.status})"
        extra: dict[str, Any] = {
            "harness_kind": "verify",
            "round": record.round,
            "layer": record.layer,
            "passed": record.passed,
            "exit_code": record.exit_code,
            "failing": record.failing,
            "duration_ms": record.duration_ms,
        }
        self._add(
            {
                "timestamp": _iso(record.ts),
                "source": "system",
                "message": f"verify round {record.round}: `{record.command}` {verdict}",
                "observation": {"results": [{"content": record.output or "(no output)"}]},
                "extra": extra,
            }
        )

    def event(self, record: EventRecord) -> None:
        self.system(f"{record.event}: {record.detail}" if record.detail else record.event, record.ts, {
            "harness_kind": "event", "event": record.event, "detail": record.detail,
        })  # fmt: skip

    def hook(self, record: HookRecord) -> None:
        """A hook's run: in the extra of the agent step it belongs to (a tool's or a stop's), else a
        system step of its own (SessionStart, SessionEnd)."""
        entry = {
            "event": record.event, "verdict": record.verdict, "reason": record.reason, "command": record.command,
            "place": record.place, "exit_code": record.exit_code, "tool_call_id": record.call_id,
        }  # fmt: skip
        step = self._open
        if step is not None and step["extra"].get("harness_step") == record.step and record.event != "SessionEnd":
            step["extra"].setdefault("harness_hooks", []).append(entry)
            return
        self.system(f"hook {record.event}: {record.verdict}", record.ts, {"harness_kind": "hook", **entry})

    def summary(self, record: SummaryRecord) -> None:
        self.system(
            f"context summary through turn {record.through_turn}",
            record.ts,
            {"harness_kind": "summary", "text": record.text, "excluded": record.excluded},
        )

    def committed(self, record: StepRecord) -> None:
        step = self._open if self._open is not None and self._open["extra"].get("harness_step") == record.step else None
        if step is None:
            step = next(
                (
                    s
                    for s in reversed(self.steps)
                    if s["source"] == "agent" and s["extra"]["harness_step"] == record.step
                ),
                None,
            )
        if step is None:
            return
        if record.snapshot_id:
            step["extra"]["snapshot"] = {"step": record.snapshot_step, "id": record.snapshot_id}
        step["extra"]["committed"] = {
            "wrote": record.wrote,
            "input_tokens": record.input_tokens,
            "output_tokens": record.output_tokens,
            "cost_usd": record.cost_usd,
        }
        if record.step in self.diffs:
            diff, note = self.diffs[record.step]
            step["extra"]["diff"] = diff
            if note:
                step["extra"]["diff_note"] = note

    def system(self, message: str, ts: float, extra: dict[str, Any]) -> None:
        self._open = None
        self._add({"timestamp": _iso(ts), "source": "system", "message": message, "extra": extra})

    def add_totals(self, metrics: dict[str, Any]) -> None:
        """Count a sub-agent's totals in this trajectory's (ATIF: the cost includes the subagents')."""
        self._totals = self._totals + Usage(
            input_tokens=metrics.get("total_prompt_tokens", 0),
            output_tokens=metrics.get("total_completion_tokens", 0),
            cached_input_tokens=metrics.get("total_cached_tokens", 0),
        )
        if "total_cost_usd" in metrics:
            self._cost += metrics["total_cost_usd"]
        else:
            self._cost_known = False

    def final_metrics(self) -> dict[str, Any]:
        metrics: dict[str, Any] = {
            "total_prompt_tokens": self._totals.input_tokens,
            "total_completion_tokens": self._totals.output_tokens,
            "total_cached_tokens": self._totals.cached_input_tokens,
            "total_steps": len(self.steps),
            "extra": {"reasoning_tokens": self._totals.reasoning_tokens, "cost_known": self._cost_known},
        }
        if self._cost_known:
            metrics["total_cost_usd"] = round(self._cost, 6)
        return metrics


def _view_of(folder: Path) -> SessionView:
    """The session as its own page reads it (each step's diff, the final patch), so the ATIF document
    carries what that page shows."""
    from harness.report.session_view import load

    return load(folder)


def _iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat().replace("+00:00", "Z")


# --- ATIF in --------------------------------------------------------------------------------------


READ_LIMIT = 512 * 1024**2
"""An ATIF file larger than this is refused before it is read."""


def read(path: Path) -> dict[str, Any]:
    """An ATIF document from a file; UsageError naming what is wrong."""
    from sandbox.named import NamedFileError, read_named

    try:
        data = json.loads(read_named(path, what="the trajectory", limit=READ_LIMIT).decode("utf-8"))
    except NamedFileError as error:
        raise UsageError(str(error)) from None
    except UnicodeDecodeError as error:
        raise UsageError(f"cannot read {path}: {error}") from None
    except RecursionError:
        raise UsageError(f"{path} nests deeper than a trajectory does (over {MAX_DEPTH} levels): not read") from None
    except ValueError as error:
        raise UsageError(f"{path} is not JSON: {error}") from None
    if _deeper_than(data, MAX_DEPTH):
        raise UsageError(f"{path} nests deeper than a trajectory does (over {MAX_DEPTH} levels): not read")
    if not isinstance(data, dict) or not isinstance(data.get("steps"), list) or "agent" not in data:
        raise UsageError(f"{path} is no ATIF trajectory (it needs `schema_version`, `agent` and `steps`)")
    version = data.get("schema_version")
    if version is not None and version not in KNOWN:
        raise UsageError(f"{path}: schema_version {version!r} is not ATIF-v1.x")
    return data


MAX_DEPTH = 64
"""How deep a document may nest (a real one is under ten; the page and its JSON dumps recurse)."""


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether value nests deeper than limit (walked without recursion)."""
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict | list):
            if depth > limit:
                return True
            pending += [(child, depth + 1) for child in (item.values() if isinstance(item, dict) else item)]
    return False


def is_atif(path: Path) -> bool:
    """Whether path is a JSON file that looks like an ATIF trajectory (read no further than needed)."""
    if not Path(path).is_file() or Path(path).suffix.lower() != ".json":
        return False
    try:
        read(path)
    except UsageError:
        return False
    return True


def to_view(data: dict[str, Any], source: Path) -> SessionView:
    """An ATIF document as the SessionView harness's trajectory page renders."""
    agent = data.get("agent") or {}
    extra = data.get("extra") or {}
    session = str(data.get("session_id") or data.get("trajectory_id") or source.stem)
    view = SessionView(session_id=session, folder=source.parent)
    started = extra.get("started") if isinstance(extra.get("started"), str) else None
    first = _stamp(started or _first_time(data.get("steps", [])))
    task = next((_text(s.get("message")) for s in data["steps"] if s.get("source") == "user"), "")
    model = str(agent.get("model_name") or "")
    view.start = StartRecord(
        ts=first,
        session_id=session,
        task=str(extra.get("task") or task),
        model=str(extra["model"])
        if isinstance(extra.get("model"), str)
        else f"{agent.get('name', '?')} {agent.get('version', '')}".strip() + (f" ({model})" if model else ""),
        repo=str(extra.get("repo") or ""),
    )
    number = 0
    totals = _Totals()
    ours = bool(extra.get("harness_session"))
    for raw in data["steps"]:
        if not isinstance(raw, dict):
            continue
        ts = _stamp(raw.get("timestamp"), first)
        origin = raw.get("source")
        own = _mapping(raw.get("extra"))
        if origin != "agent" and own.get("harness_kind") == "verify":
            verify = _verify_of(raw, own, ts)
            if verify is not None:
                (view.steps[-1] if view.steps else _zero(view)).verify.append(verify)
                continue
        if ours and origin in ("system", "user") and own.get("harness_kind") in (None, "resume"):
            continue  # harness's own prompts and resume marks: its session page lists neither
        if origin != "agent":
            said = own["detail"] if isinstance(own.get("detail"), str) else _text(raw.get("message"))
            event = EventRecord(ts=ts, event=str(own.get("event") or origin or "step"), detail=said[:4000])
            (view.steps[-1].events if view.steps else view.events).append(event)
            for result in _results(raw):
                detail = _text(result.get("content"))[:4000]
                refs = [r for r in result.get("subagent_trajectory_ref") or [] if isinstance(r, dict)]
                detail += "".join(
                    f"\nsubagent {r.get('session_id') or r.get('trajectory_id') or '?'}: {r.get('trajectory_path', '')}"
                    for r in refs
                )
                event = EventRecord(ts=ts, event="observation", detail=detail.strip())
                (view.steps[-1].events if view.steps else view.events).append(event)
            continue
        number = _int(own.get("harness_step"), number + 1)
        view.steps.append(_agent_step(raw, number, ts, totals))
    final = _mapping(data.get("final_metrics"))
    outcome = extra.get("outcome") if isinstance(extra.get("outcome"), dict) else None
    view.outcome = OutcomeRecord(
        ts=_stamp(_last_time(data["steps"]), first),
        outcome=str((outcome or {}).get("outcome") or "imported"),
        detail=str((outcome or {}).get("detail") or data.get("notes") or f"ATIF {data.get('schema_version', '')}"),
        exit_code=_int((outcome or {}).get("exit_code"), 0),
    )
    view.family = _family(extra.get("family"))
    view.totals = [] if ours else _totals_shown(final)  # harness's own: the page's facts say them already
    patch = extra.get("patch")
    if isinstance(patch, str):
        view.patch = patch
    else:
        view.problems.append("the trajectory carries no patch (only harness's own ATIF export does)")
    return view


class _Totals:
    """Tokens and cost so far, for documents whose steps do not say (every imported step is complete)."""

    def __init__(self) -> None:
        self.input_tokens = self.output_tokens = 0
        self.cost_usd = 0.0


def _zero(view: SessionView) -> StepView:
    view.steps.append(StepView(step=0))
    return view.steps[-1]


def _verify_of(raw: dict[str, Any], own: dict[str, Any], ts: float) -> VerifyRecord | None:
    """A harness verify round written as a system step, read back as the round it was."""
    output = "\n".join(_text(r.get("content")) for r in _results(raw))
    message = _text(raw.get("message"))
    command = message.split("`")[1] if message.count("`") >= 2 else ""
    try:
        return VerifyRecord(
            ts=ts,
            round=_int(own.get("round"), 1),
            layer=str(own.get("layer") or "verify"),
            command=command,
            passed=bool(own.get("passed")),
            exit_code=_int(own.get("exit_code"), 0),
            status="ok" if own.get("passed") else "exit_nonzero",
            failing=[str(name) for name in own.get("failing") or [] if isinstance(name, str | int)],
            duration_ms=_int(own.get("duration_ms"), 0),
            output="" if output == "(no output)" else output,
        )
    except ValueError:
        return None


def _totals_shown(final: dict[str, Any]) -> list[tuple[str, str]]:
    """final_metrics as facts a person reads (the known fields named, the rest left out)."""
    names = {
        "total_prompt_tokens": "prompt tokens",
        "total_completion_tokens": "completion tokens",
        "total_cached_tokens": "cached tokens",
        "total_cost_usd": "cost (USD)",
        "total_steps": "steps",
    }
    return [(label, str(final[key])) for key, label in names.items() if isinstance(final.get(key), int | float)]


def _family(value: Any) -> list[Any]:
    """The family of forks harness's own export carries, as the page draws it (anything else: none)."""
    from harness.assembly.sessions import Relative

    if not isinstance(value, list):
        return []
    found = []
    for item in value:
        if not isinstance(item, dict) or not isinstance(item.get("session_id"), str):
            return []
        at = item.get("at")
        found.append(
            Relative(
                session_id=item["session_id"],
                folder=Path(str(item.get("folder") or item["session_id"])),
                at=at if isinstance(at, int) and not isinstance(at, bool) else None,
                outcome=str(item.get("outcome") or ""),
                depth=_int(item.get("depth"), 0),
            )
        )
    return found


def _mapping(value: Any) -> dict[str, Any]:
    """A JSON object of a document, or an empty one when it is anything else."""
    return value if isinstance(value, dict) else {}


def _int(value: Any, default: int) -> int:
    """A whole number from a document (a number, or text spelling one), else default."""
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return default


def _agent_step(raw: dict[str, Any], number: int, ts: float, totals: _Totals) -> StepView:
    metrics = _mapping(raw.get("metrics"))
    own = _mapping(raw.get("extra"))
    calls = [c for c in raw.get("tool_calls") or [] if isinstance(c, dict)]
    metric_extra = _mapping(metrics.get("extra"))
    stop = own.get("stop_reason") if own.get("stop_reason") in _STOPS else ("tool_use" if calls else "end_turn")
    turn = ModelTurn(
        text=_text(raw.get("message")),
        tool_calls=[
            ToolCall(
                id=str(c.get("tool_call_id") or f"call-{number}-{n}"),
                name=str(c.get("function_name") or "?"),
                arguments=_mapping(c.get("arguments")),
            )
            for n, c in enumerate(calls)
        ],
        usage=Usage(
            input_tokens=int(metrics.get("prompt_tokens") or 0),
            output_tokens=int(metrics.get("completion_tokens") or 0),
            cached_input_tokens=int(metrics.get("cached_tokens") or 0),
        ),
        cost_usd=float(metrics.get("cost_usd") or 0.0),
        cost_known=metrics.get("cost_usd") is not None,
        model=str(raw.get("model_name") or ""),
        reasoning=Reasoning(text=str(raw["reasoning_content"])) if raw.get("reasoning_content") else None,
        stop_reason=stop,
        latency_ms=_int(metric_extra.get("latency_ms"), 0),
    )
    step = StepView(step=number, turn=turn, sent_tokens=_int(own.get("sent_tokens"), turn.usage.input_tokens))
    totals.input_tokens += turn.usage.input_tokens
    totals.output_tokens += turn.usage.output_tokens
    totals.cost_usd += turn.cost_usd
    done = _mapping(own.get("committed"))
    snapshot = _mapping(own.get("snapshot"))
    step.committed = StepRecord(
        ts=ts,
        step=number,
        snapshot_step=_int(snapshot.get("step"), 0),
        snapshot_id=str(snapshot["id"]) if snapshot.get("id") else None,
        wrote=bool(done.get("wrote")),
        input_tokens=_int(done.get("input_tokens"), totals.input_tokens),
        output_tokens=_int(done.get("output_tokens"), totals.output_tokens),
        cost_usd=float(done["cost_usd"]) if isinstance(done.get("cost_usd"), int | float) else totals.cost_usd,
    )
    if isinstance(own.get("diff"), str):
        step.diff = own["diff"]
    if isinstance(own.get("diff_note"), str):
        step.diff_note = own["diff_note"]
    names = {call.id: call.name for call in turn.tool_calls}
    for index, result in enumerate(_results(raw)):
        call_id = str(result.get("source_call_id") or "")
        if not call_id and index < len(turn.tool_calls):  # results in the calls' order, not linked by id
            call_id = turn.tool_calls[index].id
        found = result.get("extra")
        extra: dict[str, Any] = found if isinstance(found, dict) else {}
        step.calls.append(
            ToolRecord(
                ts=ts,
                step=number,
                attempt=_int(extra.get("attempt"), 0),
                call_id=call_id or f"observation-{number}",
                name=names.get(call_id, "observation"),
                arguments=next((c.arguments for c in turn.tool_calls if c.id == call_id), {}),
                decision=_parsed(Decision, extra.get("decision")),
                envelope=_parsed(Envelope, extra.get("envelope")),
                text=_text(result.get("content")),
                is_error=bool(extra.get("error_kind") or extra.get("refused")),
                error_kind=str(extra["error_kind"])
                if extra.get("error_kind")
                else ("denied" if extra.get("refused") else None),
                duration_ms=_int(extra.get("duration_ms"), 0),
                wrote=bool(extra.get("wrote")),
            )
        )
    return step


_STOPS = get_args(StopReason)


def _parsed(model: Any, value: Any) -> Any:
    """value as the pydantic model when it is one (what harness's own export wrote), else None."""
    if not isinstance(value, dict):
        return None
    try:
        return model.model_validate(value)
    except ValueError:
        return None


def _results(raw: dict[str, Any]) -> Iterable[dict[str, Any]]:
    observation = raw.get("observation") or {}
    return [r for r in observation.get("results") or [] if isinstance(r, dict)]


def _text(message: Any) -> str:
    """A message or content as text: a string, or the text parts of ContentPart arrays (media named)."""
    if message is None:
        return ""
    if isinstance(message, str):
        return message
    if isinstance(message, list):
        parts = []
        for part in message:
            if isinstance(part, dict) and part.get("type") == "text":
                parts.append(str(part.get("text") or ""))
            elif isinstance(part, dict):
                source = part.get("source") or {}
                parts.append(f"[{part.get('type', 'media')}: {source.get('path', '')}]")
        return "\n".join(parts)
    return json.dumps(message)


def _first_time(steps: list[Any]) -> str | None:
    return next((s.get("timestamp") for s in steps if isinstance(s, dict) and s.get("timestamp")), None)


def _last_time(steps: list[Any]) -> str | None:
    return next((s.get("timestamp") for s in reversed(steps) if isinstance(s, dict) and s.get("timestamp")), None)


def _stamp(text: str | None, default: float = 0.0) -> float:
    if not text:
        return default
    try:
        return dt.datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return default
