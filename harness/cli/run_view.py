"""Rich renderings of a run: the step-by-step session view and the end-of-run summary.

They show what a run recorded and act on none of it, so they read its files as plain JSON
(`harness.readback`): no record model is built, and `harness show` starts in a fraction of the time
the models would take. A field a line leaves out reads as the record's default.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from harness import readback
from harness.cli.terminal import literal, print_trimmed, visible
from harness.readback import EVERY_AGENT, amount, count, items, mapping, string

if TYPE_CHECKING:
    from harness.agent.outcome import RunResult

_STYLE = {"verified": "bold green", "unverified": "yellow", "interrupted": "yellow"}


def result_of(session_dir: Path) -> RunResult:
    """The final result object, validated (`harness show --json`); for a run that never finished,
    one built from its last state."""
    from pydantic import ValidationError

    from harness.agent.outcome import RunResult
    from harness.errors import SessionError

    try:
        return RunResult.model_validate(readback.result(session_dir))
    except ValidationError as error:
        raise SessionError(
            f"the run's state in {session_dir} is damaged and cannot be read back ({error.error_count()} field(s))"
        ) from None


TAIL_LINES = 30
"""Lines of each output `harness show -v` prints (the last ones: where a test run says what failed)."""
STEP_LINES = 2000
"""Lines of each output `harness show --step N` prints."""


def show(console: Console, sessions: Path, session: str, *, verbose: bool = False, step: int | None = None) -> None:
    """`harness show SESSION`: a run's session, a sub-agent's branch, or the commands of a session that
    never ran a model; verbose: each call's and verification's output too (its last lines); step: that
    step alone, its outputs whole (up to STEP_LINES lines each)."""
    from harness.errors import NotFoundError
    from sandbox.layout import session_folder

    folder = session_folder(sessions, session)
    if not folder.root.is_dir():
        raise NotFoundError(f"no session {session} in {folder.root.parent}")
    branch = subagent_of(folder.info)
    if branch is not None:  # a sub-agent's session: its records are in its parent's file
        render_subagent(console, folder.root, *branch)
    elif not folder.run_config.is_file() and not folder.trajectory.is_file():
        render_commands(console, folder.root)
    else:
        render_session(console, folder.root, verbose=verbose, only=step)


def subagent_of(info: Path) -> tuple[Path, str] | None:
    """(the parent's session folder, the sub-agent's name) when the session is a sub-agent's branch."""
    import json

    try:
        parent = json.loads(info.read_text(encoding="utf-8")).get("parent") or {}
    except (OSError, ValueError, AttributeError):
        return None
    agent, where = parent.get("agent"), parent.get("folder")
    return (Path(where), agent) if isinstance(agent, str) and isinstance(where, str) else None


def render_subagent(console: Console, session_dir: Path, parent_dir: Path, agent: str) -> None:
    """A sub-agent's session: its records (and its own sub-agents') from its parent's trajectory, then
    its result."""
    console.print(
        f"[bold]session {literal(Path(session_dir).name)}[/]: sub-agent {literal(agent)} of session "
        f"{literal(parent_dir.name)} (its records are in that session's trajectory)"
    )
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True, style="bold")
    grid.add_column(overflow="fold")
    below = agent + "."
    for record in readback.records(parent_dir, EVERY_AGENT) if parent_dir.is_dir() else []:
        whose = string(record.get("agent"))
        if whose != agent and not whose.startswith(below):
            continue
        row = _row(record)
        if row is not None:
            if whose != agent:
                row = (f"{literal(whose)} {row[0]}" if row[0] else "", "[dim]│[/] " + row[1])
            grid.add_row(*row)
    print_trimmed(console, grid)
    found = readback.state(session_dir)
    if found is not None:
        render_summary(console, readback.result(session_dir, found))


def render_session(console: Console, session_dir: Path, *, verbose: bool = False, only: int | None = None) -> None:
    """Steps, tool calls, results, tokens, cost and outcome of a recorded session: a step column and
    one column of text that wraps at the terminal's width (readable at 80 columns). verbose: under each
    call and verification, its output's last lines; only: that step alone, its outputs whole."""
    from harness.errors import UsageError

    name = Path(session_dir).name
    console.print(f"[bold]session {literal(name)}[/]" + (f" step {only}" if only is not None else ""))
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True, style="bold")
    grid.add_column(overflow="fold")
    first = True
    every = readback.records(session_dir, EVERY_AGENT)
    if only is not None:
        steps = sorted({count(r.get("step")) for r in every if r.get("kind") == "turn" and r.get("agent") is None})
        if only not in steps:
            span = f"1-{steps[-1]}" if steps else "none"
            raise UsageError(f"session {name} has no step {only} (its steps: {span})")
    lines = STEP_LINES if only is not None else TAIL_LINES
    for kind, item, where in with_network(every, network_requests(session_dir)):
        if only is not None and (kind != "record" or item.get("agent") is not None or item.get("step") != only):
            continue
        row = _row(item) if kind == "record" else _network_row(item, where)
        if row is None:
            continue
        if (verbose or only is not None) and kind == "record" and item.get("agent") is None:
            shown = _outputs(
                item, lines, None if only is not None else f"`harness show {name} --step {count(item.get('step'))}`"
            )
            row = (row[0], row[1] + "".join(f"\n{part}" for part in shown))
        if kind == "record" and item.get("agent") is not None:  # a sub-agent's: under the call that started it
            text = "[dim]files changed (kept in its branch)[/]" if item.get("kind") == "step" else row[1]
            row = (f"{literal(string(item.get('agent')))} {row[0]}" if row[0] else "", "[dim]│[/] " + text)
        if row[0] and not first:
            grid.add_row("", "")
        first = False
        grid.add_row(*row)
    print_trimmed(console, grid)
    if only is not None:
        return
    start = next((r for r in every if r.get("kind") == "start" and r.get("agent") is None), None)
    _devcontainer(console, start)
    _hosted(console, start)
    found = readback.state(session_dir)
    if found is None:  # a framework's calls (the integrations' box): no model run
        ended = [r for r in every if r.get("kind") == "outcome" and r.get("agent") is None]
        said = f"{string(ended[-1].get('outcome'))}: {string(ended[-1].get('detail'))}" if ended else "still open"
        console.print(f"calls made by an outside framework, no model run of harness; {visible(said)}", markup=False)
        return
    render_attempts(console, Path(session_dir))
    render_summary(console, readback.result(session_dir, found))
    render_warnings(console, Path(session_dir))
    own = [r for r in every if r.get("agent") is None]
    ended_at = max((i for i, r in enumerate(own) if r.get("kind") == "outcome"), default=-1)
    after = [r for r in own[ended_at + 1 :] if r.get("kind") == "event" and r.get("event") == "rolled_back"]
    if ended_at >= 0 and after:  # the result above no longer describes the workspace
        console.print(f"[yellow]rolled back:[/] {literal(string(after[-1].get('detail')))}", soft_wrap=True)
    from harness.landing.trail import trail

    for landed in trail(Path(session_dir)):
        console.print(
            f"applied: branch {landed.get('branch')} at {str(landed.get('commit'))[:12]} in {landed.get('repo')}",
            markup=False,
            soft_wrap=True,
        )


def _outputs(record: Mapping[str, Any], lines: int, whole: str | None) -> list[str]:
    """A call's output (its envelope's stdout and stderr, or the result a file tool gave) or a
    verification's, each its last `lines` lines, cut with a line that says how much was left out and,
    for a cut tail (whole: the command that shows more), where the rest is."""
    kind = record.get("kind")
    envelope = mapping(record.get("envelope"))
    if kind == "verify":
        parts = [("output", string(record.get("output")), 0)]
    elif kind == "tool" and envelope:
        parts = [
            ("stdout", string(envelope.get("stdout")), count(envelope.get("stdout_dropped"))),
            ("stderr", string(envelope.get("stderr")), count(envelope.get("stderr_dropped"))),
        ]
    elif kind == "tool":
        text = string(record.get("text"))
        parts = [("result", text, 0)] if len(text) > 240 or "\n" in text.strip() else []  # else: its line says it
    else:
        return []
    shown = []
    for label, text, dropped in parts:
        if not text.strip() and not dropped:
            continue
        every = text.rstrip("\n").split("\n") if text.strip() else []
        kept = every[-lines:]
        block = [f"[dim]{label}:[/]"]
        if len(every) > len(kept):
            more = f"; {whole} shows up to {STEP_LINES}" if whole else ""
            block.append(f"[dim]… {len(every) - len(kept)} earlier line(s) left out{more}[/]")
        block += [literal(line) for line in kept]
        if dropped:
            block.append(f"[dim]… {dropped} byte(s) the sandbox did not keep (the output ceiling)[/]")
        shown.append("\n".join(block))
    return shown


def _hosted(console: Console, start: Mapping[str, Any] | None) -> None:
    """Which agent the run hosted, and the isolation it got."""
    config = start.get("config") if start is not None else None
    if not isinstance(config, dict) or not isinstance(config.get("agent"), str) or not config["agent"]:
        return
    from harness.environment.agents import AGENTS

    name = config["agent"]
    known = AGENTS.get(name)
    if known is None:
        said = "not an agent this version of harness hosts"
    else:
        said = known.with_shell(
            "own" if config.get("agent_shell") == "own" and known.own_shell else "harness"
        ).isolation
    console.print(f"hosted agent {literal(name)}: {literal(said)}", soft_wrap=True)


def _devcontainer(console: Console, start: Mapping[str, Any] | None) -> None:
    """What the run took of the repository's devcontainer.json, and what it never applied (and why)."""
    config = start.get("config") if start is not None else None
    found = (config.get("devcontainer") if isinstance(config, dict) else None) or {}
    if not isinstance(found, dict) or not found:
        return
    console.print(
        f"devcontainer {literal(str(found.get('path')))}: calls start from {literal(str(found.get('built')))}",
        soft_wrap=True,
    )
    for item in found.get("features") or []:
        console.print(
            f"  feature: {literal(str(item.get('id')))} {literal(str(item.get('version') or '?'))} "
            f"(sha256 {literal(str(item.get('sha256', ''))[:12])}, from "
            f"{_feature_source(item)})",
            soft_wrap=True,
        )
    for name, service in (found.get("services") or {}).items():
        console.print(f"  service: {literal(str(name))} ({literal(str(service.get('image')))})", soft_wrap=True)
    for line in found.get("applied") or []:
        console.print(f"  limit: {literal(str(line))}", soft_wrap=True)
    for item in found.get("dropped") or []:
        console.print(
            f"  not applied: {literal(str(item.get('key')))}: {literal(str(item.get('why')))}", soft_wrap=True
        )


def _feature_source(item: dict[str, Any]) -> str:
    if str(item.get("id")).startswith("."):
        return "the repository"
    return "its registry" if item.get("fetched") else literal(str(item.get("source")))


def render_commands(console: Console, session_dir: Path) -> None:
    """A session that never ran a model (`harness exec --session`, `harness tool`): each step the
    command it recorded, and the egress requests under the step whose command made them."""
    from sandbox.durable import read_lines
    from sandbox.layout import SessionFolder

    steps = [line for line in read_lines(SessionFolder(Path(session_dir)).steps) if isinstance(line, dict)]
    requests = network_requests(session_dir)
    console.print(f"[bold]session {literal(Path(session_dir).name)}[/]  [dim](no model run: its commands)[/]")
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True, style="bold")
    grid.add_column(overflow="fold")
    for line in steps:  # a step is recorded once its command ended: the requests before it are its command's
        ts = amount(line.get("time"))
        grid.add_row(
            f"step {line.get('step', '?')}",
            f"{literal(str(line.get('kind', '')))} {_clip(str(line.get('note', '')), 400)}",
        )
        for request in folded(_until(requests, ts)):
            grid.add_row(*_network_row(request, ""))
    for request in folded(requests):
        grid.add_row(*_network_row(request, ""))
    print_trimmed(console, grid)
    every = network_requests(session_dir)
    if every:
        refused = sum(1 for r in every if not r.get("allowed"))
        console.print(f"network: {len(every)} request(s) through the egress proxy, {refused} refused")


def _row(record: Mapping[str, Any]) -> tuple[str, str] | None:
    """(step column, text) of one record, or None for what the view leaves out."""
    kind = record.get("kind")
    if kind == "turn":
        turn, step = mapping(record.get("turn")), count(record.get("step"))
        usage, reasoning = mapping(turn.get("usage")), mapping(turn.get("reasoning"))
        calls = "".join(
            f"\n→ {literal(string(c.get('name')))}({_args(mapping(c.get('arguments')))})"
            for c in map(mapping, items(turn.get("tool_calls")))
        )
        counted = ", estimated: the server reported none" if usage.get("estimated") else ""
        tokens = f"  [dim]({count(usage.get('input_tokens'))} in / {count(usage.get('output_tokens'))} out tokens{counted})[/]"
        text = (_clip(string(turn.get("text")), 600) or "[dim](no text)[/]") + tokens + calls
        if reasoning.get("text") or reasoning.get("blocks") or reasoning.get("extra"):
            text = f"[dim]thinking: {_clip(string(reasoning.get('text')) or '(redacted)', 300)}[/]\n" + text
        if turn.get("stop_reason") == "refusal":
            text = "[yellow]refused[/] " + text
        return (f"step {step}", text)
    if kind == "tool":
        first = _first_line(record)
        decision = (
            string(mapping(record.get("decision")).get("action"))
            if record.get("decision")
            else "the agent's own call"
            if string(record.get("name")).startswith("agent.")
            else "not gated"
        )
        if record.get("error_kind") == "hook_blocked":
            decision = "blocked by a hook before the gate"
        flag = "[red]✗[/]" if record.get("is_error") else "[green]✓[/]"
        return (
            "",
            f"{flag} {literal(string(record.get('name')))}: {_clip(first, 240)} "
            f"[dim]({literal(decision)}, {count(record.get('duration_ms'))} ms)[/]",
        )
    if kind == "step" and (record.get("wrote") if record.get("changed") is None else record.get("changed")):
        step = count(record.get("step"))
        return ("", f"[dim]files changed: the state after step {step} is kept (diff, rollback --to {step})[/]")
    if kind == "verify":
        failing = [string(name) for name in items(record.get("failing"))[:5]]
        mark = "[green]passed[/]" if record.get("passed") else f"[red]failed[/] {_clip(', '.join(failing), 300)}"
        cause = string(record.get("cause"))
        why = f"\n[yellow]cause:[/] {literal(_clip(cause, 600))}" if cause else ""
        return (f"verify {count(record.get('round'))}", f"exit {string(record.get('exit_code'))}: {mark}{why}")
    if kind == "hook":
        verdict = string(record.get("verdict"))
        style = {"block": "red", "failed": "yellow"}.get(verdict, "dim")
        tool = string(record.get("tool_name"))
        target = f" {literal(tool)}" if tool else ""
        reason = string(record.get("reason"))
        why = f": {_clip(reason, 300)}" if reason else ""
        changed = " [yellow](changed the input)[/]" if record.get("updated_input") is not None else ""
        bounds = string(record.get("bounds"))
        changed += f" [yellow]({_clip(bounds, 200)})[/]" if bounds else ""
        exited = record.get("exit_code")
        return (
            "",
            f"[{style}]hook {literal(string(record.get('event')))}{target} {literal(verdict)}[/]{why}{changed} "
            f"[dim]({readback.whose(string(record.get('place')))})[/] "
            f"[dim]`{_clip(string(record.get('command')), 80)}` exit {string(exited) if exited is not None else 'None'}, "
            f"{count(record.get('duration_ms'))} ms[/]",
        )
    if kind == "delegate":
        return ("", _delegated(record))
    if kind == "event" and record.get("event") in ("resumed", "interrupted", "resume_changed", "fork", "instructions"):
        return ("", f"[yellow]{literal(string(record.get('event')))}[/] {_clip(string(record.get('detail')), 400)}")
    return None


def _delegated(record: Mapping[str, Any]) -> str:
    """A sub-agent's start (its task and reserve) or end (its outcome and change)."""
    child = literal(string(record.get("child")))
    if record.get("phase") == "start":
        reserve = literal(readback.reserve_text(mapping(record.get("reserve"))))
        return f"[cyan]sub-agent {child} started[/] ({reserve}): {_clip(string(record.get('task')), 300)}"
    change = string(record.get("change"))
    style = "red" if change == "conflict" else "dim"
    tokens = count(record.get("input_tokens")) + count(record.get("output_tokens"))
    said = readback.change_text(
        change, [string(p) for p in items(record.get("paths"))], [string(p) for p in items(record.get("conflicts"))]
    )
    cost = record.get("cost_usd")
    return (
        f"[cyan]sub-agent {child} ended[/] {literal(string(record.get('outcome')))}; "
        f"[{style}]{literal(said)}[/] [dim]({count(record.get('steps'))} steps, {tokens} tokens, "
        f"${amount(cost):.4f})[/]"
    )


def render_steps(console: Console, session_dir: Path) -> None:
    """One line per tool call and verification: the compact trace printed at the end of a run (a
    sub-agent's lines indented under the call that started it)."""
    final = ""
    every = readback.records(session_dir, EVERY_AGENT)
    for kind, record, where in with_network(every, network_requests(session_dir)):
        if kind == "net":
            _network_line(console, record, where)
            continue
        what, step = record.get("kind"), count(record.get("step"))
        if record.get("agent") is not None:
            if what == "tool":
                mark = "[red]✗[/]" if record.get("is_error") else "[green]✓[/]"
                _hanging(
                    console,
                    f"  {literal(string(record.get('agent')))} step {step:>2}  {mark} "
                    f"{literal(string(record.get('name'))):<12}",
                    _said(record, 80),
                )
            continue
        if what == "delegate" and record.get("phase") == "end":
            console.print(f"        {_delegated(record)}", soft_wrap=True)
        turn = mapping(record.get("turn"))
        if what == "turn" and not turn.get("tool_calls"):
            final = string(turn.get("text"))
        if what == "tool":
            envelope = record.get("envelope")
            exited = isinstance(envelope, dict) and envelope.get("exit_code") != 0
            mark = "[red]✗[/]" if record.get("is_error") else "[yellow]·[/]" if exited else "[green]✓[/]"
            _hanging(console, f"step {step:>2}  {mark} {literal(string(record.get('name'))):<12}", _said(record, 90))
        elif what == "hook" and record.get("verdict") in ("block", "failed"):
            _hanging(
                console,
                f"step {step:>2}  [red]hook[/] {literal(string(record.get('event')))} {string(record.get('verdict'))}:",
                _clip(string(record.get("reason")), 600),
            )
        elif what == "verify":
            status = "[green]passed[/]" if record.get("passed") else "[red]failed[/]"
            layer = string(record.get("layer", "verify"))
            named = "" if layer == "verify" else f" {literal(layer)} `{literal(string(record.get('command')))}`"
            console.print(
                f"verify {count(record.get('round'))}{named}  exit {string(record.get('exit_code'))}: {status}",
                soft_wrap=True,
            )
            if record.get("cause"):
                console.print(f"        [yellow]cause:[/] {literal(string(record.get('cause')))}", soft_wrap=True)
        elif what == "summary":
            left_out = [string(line) for line in items(record.get("excluded"))]
            excluded = f"; excluded: {literal('; '.join(left_out))}" if left_out else ""
            console.print(
                f"step {step:>2}  [cyan]summary[/] of model turns 1-{count(record.get('through_turn'))}: "
                f"~{count(record.get('before_tokens'))} -> ~{count(record.get('after_tokens'))} tokens{excluded}",
                soft_wrap=True,
            )
    if final:
        console.print(f"[bold]model:[/] {literal(final.strip())}", soft_wrap=True)


def network_requests(session_dir: Path) -> list[dict[str, Any]]:
    """The session's egress requests, oldest first (none without --allow-net)."""
    from sandbox.layout import SessionFolder
    from sandbox.network.netlog import read_log

    return sorted(read_log(SessionFolder(Path(session_dir)).network), key=lambda request: amount(request.get("ts")))


def with_network(
    records: list[dict[str, Any]], requests: list[dict[str, Any]]
) -> Iterator[tuple[str, dict[str, Any], str]]:
    """The records with the egress requests among them ("record" or "net", the item, where): each
    request just before the first record written after it, under the step of the call that made it
    (`setup` before any call); the same request made again in a row is one item (see `folded`)."""
    calls = 0
    for record in records:
        tool = record.get("kind") == "tool"
        where = f"step {count(record.get('step')):>2}" if tool else "setup  " if not calls else "       "
        for request in folded(_until(requests, amount(record.get("ts")))):
            yield "net", request, where
        calls += tool
        yield "record", record, ""
    for request in folded(requests):
        yield "net", request, "       "


def _until(requests: list[dict[str, Any]], ts: float) -> list[dict[str, Any]]:
    """The requests (taken off the front of the list) made by ts."""
    taken = []
    while requests and amount(requests[0].get("ts")) <= ts:
        taken.append(requests.pop(0))
    return taken


def folded(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The requests with each run of the same request in a row (same target, same verdict, same reason:
    a client's retries) as one, `times` saying how many and the bytes summed."""
    out: list[dict[str, Any]] = []
    for request in requests:
        last = out[-1] if out else None
        if last is not None and _same(last, request):
            last["times"] = count(last.get("times")) + 1
            for key in ("sent", "received"):
                last[key] = count(last.get(key)) + count(request.get(key))
            continue
        out.append({**request, "times": 1})
    return out


def _same(one: dict[str, Any], other: dict[str, Any]) -> bool:
    keys = ("allowed", "method", "host", "port") + (() if one.get("allowed") else ("reason",))
    return all(one.get(key) == other.get(key) for key in keys)


def target_of(request: dict[str, Any]) -> str:
    times = count(request.get("times"))
    again = f" ×{times}" if times > 1 else ""
    return literal(f"{request.get('method', '?')} {request.get('host', '?')}:{request.get('port', '?')}") + again


def _network_row(request: dict[str, Any], where: str) -> tuple[str, str]:
    target = target_of(request)
    if request.get("allowed"):
        result = f"[green]allowed[/] ↑{request.get('sent', 0)} B ↓{request.get('received', 0)} B"
    else:
        result = f"[red]refused[/] {literal(str(request.get('reason', '')))}"
    return ("setup" if where.strip() == "setup" else "", f"net {target} {result}")


def _network_line(console: Console, request: dict[str, Any], where: str) -> None:
    """A request through the session's egress proxy, under the step whose call made it."""
    target = target_of(request)
    if request.get("allowed"):
        sizes = f"↑{request.get('sent', 0)} B ↓{request.get('received', 0)} B"
        console.print(f"{where}    [green]net[/] {target}  {sizes}", soft_wrap=True)
    else:
        console.print(
            f"{where}    [red]net refused[/] {target}: {literal(str(request.get('reason', '')))}", soft_wrap=True
        )


def _share(tokens: dict[str, int]) -> str:
    """The cached share of the input tokens (the provider's prompt cache at work), when any came in."""
    total = tokens.get("input", 0)
    return f" ({tokens.get('cached', 0) / total:.0%} of input)" if total else ""


def _estimated(tokens: dict[str, int]) -> str:
    """How many of the tokens harness counted because the server reported none."""
    counted = tokens.get("estimated", 0)
    return f"\n          [yellow]{counted} of them estimated[/]: the model server reported no usage" if counted else ""


def render_attempts(console: Console, session_dir: Path) -> None:
    """A run of attempts: one line per attempt (its session, outcome, change, steps, cost), the chosen
    one marked, and why it was chosen."""
    found = readback.attempts(session_dir)
    if found is None:
        return
    grid = Table.grid(padding=(0, 2))
    names = ("attempt", "session", "change", "steps", "cost", "outcome")
    for name in names:
        grid.add_column(no_wrap=name != "outcome", overflow="fold")
    grid.add_row(*(f"[dim]{name}[/]" for name in names))
    for entry in items(found.get("attempts")):
        attempt = mapping(entry)
        outcome = readback.current_outcome(string(attempt.get("outcome"))) or "not ended"
        files = items(attempt.get("files"))
        change = f"{len(files)} file(s), {count(attempt.get('lines_changed'))} line(s)" if files else "none"
        mark = " [bold green]✓ chosen[/]" if attempt.get("chosen") is True else ""
        detail = string(attempt.get("detail")) if outcome in ("refused", "interrupted") else ""
        grid.add_row(
            literal(string(attempt.get("name"))) + mark, literal(string(attempt.get("session_id"))), change,
            str(count(attempt.get("steps"))), f"${amount(attempt.get('cost_usd')):.4f}",
            literal(outcome) + (f" — {literal(detail)}" if detail else ""),
        )  # fmt: skip
    print_trimmed(console, grid)
    why = string(found.get("why"))
    if why:
        console.print(f"chosen: {literal(why)} (select {literal(string(found.get('select')))})")


def render_summary(console: Console, result: Mapping[str, Any]) -> None:
    """The result's panel (a result as `harness show --json` prints it)."""
    outcome, detail = readback.current_outcome(string(result.get("outcome"))), string(result.get("detail"))
    tokens = {key: count(value) for key, value in mapping(result.get("tokens")).items()}
    style = _STYLE.get(outcome, "bold red")
    lines = [
        f"outcome   [{style}]{literal(outcome)}[/]" + (f" — {literal(detail)}" if detail else ""),
        f"steps     {count(result.get('steps'))}{_by_subagents(result)}   "
        f"verify rounds {count(result.get('verify_rounds'))}",
        f"tokens    in {tokens.get('input', 0)}  out {tokens.get('output', 0)}"
        f"  cached {tokens.get('cached', 0)}{_share(tokens)}{_estimated(tokens)}",
        f"cost      ${amount(result.get('cost_usd')):.4f}   elapsed {amount(result.get('elapsed_s')):.1f}s",
        f"session   {literal(string(result.get('session_id')))}  ({literal(string(result.get('session_dir')))})",
        f"patch     {literal(string(result.get('patch')) or '-')}",
    ]
    if result.get("evidence"):
        lines.append(f"evidence  {literal(str(result.get('evidence')))}")
    console.print(Panel("\n".join(lines), title="harness run", expand=False))


FAILED_CLOSED = "the hook failed, so it blocks"


def hook_warnings(session_dir: Path) -> list[str]:
    """One line per gating hook that failed and so blocked calls (hooks that gate fail closed): how
    many of the run's calls it blocked, and why it failed the first time. A run can end verified with
    every call blocked; this says so."""
    records = readback.records(session_dir)
    calls = [r for r in records if r.get("kind") == "tool"]
    failed: dict[str, list[Mapping[str, Any]]] = {}
    for record in records:
        if record.get("kind") == "hook" and string(record.get("reason")).startswith(FAILED_CLOSED):
            failed.setdefault(string(record.get("command")), []).append(record)
    lines = []
    for command, runs in failed.items():
        blocked = {string(r.get("call_id")) for r in runs if r.get("call_id")}
        why = string(runs[0].get("reason")).split(": ", 1)[-1]
        lines.append(
            f"warning: the hook `{_clip(command, 120)}` failed {len(runs)} time(s) and blocked "
            f"{len(blocked)} of the run's {len(calls)} call(s) (hooks that gate fail closed): {_clip(why, 300)}"
        )
    return lines


def render_warnings(console: Console, session_dir: Path) -> None:
    for line in hook_warnings(session_dir):
        console.print(f"[yellow]{literal(line)}[/]", soft_wrap=True)


def _by_subagents(result: Mapping[str, Any]) -> str:
    steps = count(result.get("subagent_steps"))
    return f" (+{steps} by sub-agents)" if steps else ""


def render_patch(console: Console, patch_path: str | None) -> None:
    if not patch_path or not Path(patch_path).is_file():
        return
    text = Path(patch_path).read_text(encoding="utf-8")
    if text.strip() and console.is_terminal:  # a terminal gets the patch's control characters spelled out
        from rich.syntax import Syntax  # pygments: only for a patch on a terminal

        console.print(Syntax(visible(text), "diff", theme="ansi_dark", background_color="default", word_wrap=True))
    elif text.strip():
        console.file.write(text)  # byte-exact when piped: a cropped line would corrupt the patch
    else:
        console.print("[dim](no changes)[/]")


def _args(arguments: dict[str, Any]) -> str:
    return ", ".join(f"{literal(str(k))}={_clip(repr(v), 60)}" for k, v in arguments.items())


def _said(record: Mapping[str, Any], limit: int) -> str:
    """What a call's line says: its output's first line cut at limit, a refusal or an error whole (up to
    600 characters: why it did not run is what a person reads the line for)."""
    return _clip(_first_line(record), 600 if record.get("is_error") else limit)


def _hanging(console: Console, head: str, text: str) -> None:
    """head, then text wrapping under itself at the terminal's width (nothing cut, no padded line)."""
    from rich.table import Table

    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    grid.add_row(head, text)
    print_trimmed(console, grid)


def _clip(text: str, limit: int) -> str:
    """Shortened, its control characters made visible and escaped: model and tool text must never be
    read as rich markup, nor act on the terminal."""
    text = text.strip()
    return literal(text if len(text) <= limit else text[: limit - 1] + "…")


def _first_line(record: Mapping[str, Any]) -> str:
    """The first line of a tool record's text."""
    text = string(record.get("text"))
    return text.splitlines()[0] if text else ""
