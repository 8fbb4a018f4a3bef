"""Rich renderings of a run: the step-by-step session view and the end-of-run summary."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table

from harness.agent.outcome import RunResult, RunState, exit_code_for_outcome, token_counts
from harness.cli.terminal import literal, visible
from harness.trajectory import EVERY_AGENT, OutcomeRecord, read_records, read_state

_STYLE = {"verified": "bold green", "unverified": "yellow", "interrupted": "yellow"}


def result_of(session_dir: Path) -> RunResult:
    """The final result object; for a run that never finished, one built from its last state."""
    state = read_state(session_dir, RunState)
    if state is None:
        raise FileNotFoundError(f"no run recorded in {session_dir}")
    if state.result is not None:
        return state.result
    spent = state.spent
    return RunResult(
        session_id=state.session_id,
        outcome="incomplete",
        detail="the run did not finish; resume it",
        exit_code=exit_code_for_outcome("interrupted"),
        verified=False,
        steps=state.step,
        tokens=token_counts(spent),
        cost_usd=spent.cost_usd,
        elapsed_s=spent.elapsed_s,
        verify_rounds=state.verify_rounds,
        session_dir=str(session_dir),
    )


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
    for record in read_records(parent_dir, EVERY_AGENT) if parent_dir.is_dir() else []:
        if record.agent != agent and not (record.agent or "").startswith(below):
            continue
        row = _row(record)
        if row is not None:
            if record.agent != agent:
                row = (f"{literal(record.agent)} {row[0]}" if row[0] else "", "[dim]│[/] " + row[1])
            grid.add_row(*row)
    console.print(grid)
    if read_state(session_dir, RunState) is not None:
        render_summary(console, result_of(session_dir))


def render_session(console: Console, session_dir: Path) -> None:
    """Steps, tool calls, results, tokens, cost and outcome of a recorded session: a step column and
    one column of text that wraps at the terminal's width (readable at 80 columns)."""
    console.print(f"[bold]session {literal(Path(session_dir).name)}[/]")
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True, style="bold")
    grid.add_column(overflow="fold")
    first = True
    every = read_records(session_dir, EVERY_AGENT)
    for kind, item, where in with_network(every, network_requests(session_dir)):
        row = _row(item) if kind == "record" else _network_row(item, where)
        if row is None:
            continue
        if kind == "record" and item.agent is not None:  # a sub-agent's: under the call that started it
            text = "[dim]files changed (kept in its branch)[/]" if item.kind == "step" else row[1]
            row = (f"{literal(item.agent)} {row[0]}" if row[0] else "", "[dim]│[/] " + text)
        if row[0] and not first:
            grid.add_row("", "")
        first = False
        grid.add_row(*row)
    console.print(grid)
    _devcontainer(console, next((r for r in every if r.kind == "start" and r.agent is None), None))
    if read_state(session_dir, RunState) is None:  # a framework's calls (the integrations' box): no model run
        ended = [r for r in every if isinstance(r, OutcomeRecord) and r.agent is None]
        said = f"{ended[-1].outcome}: {ended[-1].detail}" if ended else "still open"
        console.print(f"calls made by an outside framework, no model run of harness; {visible(said)}", markup=False)
        return
    render_summary(console, result_of(session_dir))
    from harness.landing.trail import trail

    for landed in trail(Path(session_dir)):
        console.print(
            f"applied: branch {landed.get('branch')} at {str(landed.get('commit'))[:12]} in {landed.get('repo')}",
            markup=False,
            soft_wrap=True,
        )


def _devcontainer(console: Console, start: Any) -> None:
    """What the run took of the repository's devcontainer.json, and what it never applied (and why)."""
    found = (start.config.get("devcontainer") if start is not None else None) or {}
    if not found:
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
        ts = float(line.get("time", 0))
        grid.add_row(
            f"step {line.get('step', '?')}",
            f"{literal(str(line.get('kind', '')))} {_clip(str(line.get('note', '')), 400)}",
        )
        while requests and float(requests[0].get("ts", 0)) <= ts:
            grid.add_row(*_network_row(requests.pop(0), ""))
    for request in requests:
        grid.add_row(*_network_row(request, ""))
    console.print(grid)
    every = network_requests(session_dir)
    if every:
        refused = sum(1 for r in every if not r.get("allowed"))
        console.print(f"network: {len(every)} request(s) through the egress proxy, {refused} refused")


def _row(record: Any) -> tuple[str, str] | None:
    """(step column, text) of one record, or None for what the view leaves out."""
    if record.kind == "turn":
        turn = record.turn
        calls = "".join(f"\n→ {literal(c.name)}({_args(c.arguments)})" for c in turn.tool_calls)
        counted = ", estimated: the server reported none" if turn.usage.estimated else ""
        tokens = f"  [dim]({turn.usage.input_tokens} in / {turn.usage.output_tokens} out tokens{counted})[/]"
        text = (_clip(turn.text, 600) or "[dim](no text)[/]") + tokens + calls
        if turn.reasoning:
            text = f"[dim]thinking: {_clip(turn.reasoning.text or '(redacted)', 300)}[/]\n" + text
        if turn.stop_reason == "refusal":
            text = "[yellow]refused[/] " + text
        return (f"step {record.step}", text)
    if record.kind == "tool":
        first = record.text.splitlines()[0] if record.text else ""
        decision = record.decision.action if record.decision is not None else "not gated"
        flag = "[red]✗[/]" if record.is_error else "[green]✓[/]"
        return ("", f"{flag} {literal(record.name)}: {_clip(first, 240)} [dim]({decision}, {record.duration_ms} ms)[/]")
    if record.kind == "step" and record.wrote:
        return (
            "",
            f"[dim]files changed: the state after step {record.step} is kept (diff, rollback --to {record.step})[/]",
        )
    if record.kind == "verify":
        mark = "[green]passed[/]" if record.passed else f"[red]failed[/] {_clip(', '.join(record.failing[:5]), 300)}"
        return (f"verify {record.round}", f"exit {record.exit_code}: {mark}")
    if record.kind == "hook":
        style = {"block": "red", "failed": "yellow"}.get(record.verdict, "dim")
        target = f" {literal(record.tool_name)}" if record.tool_name else ""
        why = f": {_clip(record.reason, 300)}" if record.reason else ""
        changed = " [yellow](changed the input)[/]" if record.updated_input is not None else ""
        return (
            "",
            f"[{style}]hook {literal(record.event)}{target} {record.verdict}[/]{why}{changed} "
            f"[dim]({record.whose})[/] "
            f"[dim]`{_clip(record.command, 80)}` exit {record.exit_code}, {record.duration_ms} ms[/]",
        )
    if record.kind == "delegate":
        return ("", _delegated(record))
    if record.kind == "event" and record.event in ("resumed", "interrupted", "resume_changed", "fork"):
        return ("", f"[yellow]{literal(record.event)}[/] {_clip(record.detail, 400)}")
    return None


def _delegated(record: Any) -> str:
    """A sub-agent's start (its task and reserve) or end (its outcome and change)."""
    if record.phase == "start":
        return f"[cyan]sub-agent {literal(record.child)} started[/] ({record.reserve_text}): {_clip(record.task, 300)}"
    style = "red" if record.change == "conflict" else "dim"
    tokens = record.input_tokens + record.output_tokens
    return (
        f"[cyan]sub-agent {literal(record.child)} ended[/] {literal(record.outcome)}; "
        f"[{style}]{literal(record.change_text)}[/] [dim]({record.steps} steps, {tokens} tokens, ${record.cost_usd:.4f})[/]"
    )


def render_steps(console: Console, session_dir: Path) -> None:
    """One line per tool call and verification: the compact trace printed at the end of a run (a
    sub-agent's lines indented under the call that started it)."""
    final = ""
    for kind, record, where in with_network(read_records(session_dir, EVERY_AGENT), network_requests(session_dir)):
        if kind == "net":
            _network_line(console, record, where)
            continue
        if record.agent is not None:
            if record.kind == "tool":
                first = record.text.splitlines()[0] if record.text else ""
                mark = "[red]✗[/]" if record.is_error else "[green]✓[/]"
                console.print(
                    f"  {literal(record.agent)} step {record.step:>2}  {mark} {literal(record.name):<12} {_clip(first, 80)}",
                    soft_wrap=True,
                )
            continue
        if record.kind == "delegate" and record.phase == "end":
            console.print(f"        {_delegated(record)}", soft_wrap=True)
        if record.kind == "turn" and not record.turn.tool_calls:
            final = record.turn.text
        if record.kind == "tool":
            first = record.text.splitlines()[0] if record.text else ""
            exited = record.envelope is not None and record.envelope.exit_code != 0
            mark = "[red]✗[/]" if record.is_error else "[yellow]·[/]" if exited else "[green]✓[/]"
            console.print(
                f"step {record.step:>2}  {mark} {literal(record.name):<12} {_clip(first, 90)}", soft_wrap=True
            )
        elif record.kind == "hook" and record.verdict in ("block", "failed"):
            console.print(
                f"step {record.step:>2}  [red]hook[/] {literal(record.event)} {record.verdict}: {_clip(record.reason, 90)}",
                soft_wrap=True,
            )
        elif record.kind == "verify":
            status = "[green]passed[/]" if record.passed else "[red]failed[/]"
            layer = "" if record.layer == "verify" else f" {literal(record.layer)} `{literal(record.command)}`"
            console.print(f"verify {record.round}{layer}  exit {record.exit_code}: {status}", soft_wrap=True)
        elif record.kind == "summary":
            excluded = f"; excluded: {literal('; '.join(record.excluded))}" if record.excluded else ""
            console.print(
                f"step {record.step:>2}  [cyan]summary[/] of model turns 1-{record.through_turn}: "
                f"~{record.before_tokens} -> ~{record.after_tokens} tokens{excluded}",
                soft_wrap=True,
            )
    if final:
        console.print(f"[bold]model:[/] {literal(final.strip())}", soft_wrap=True)


def network_requests(session_dir: Path) -> list[dict[str, Any]]:
    """The session's egress requests, oldest first (none without --allow-net)."""
    from sandbox.layout import SessionFolder
    from sandbox.network.egress import read_log

    return sorted(read_log(SessionFolder(Path(session_dir)).network), key=lambda request: request.get("ts", 0))


def with_network(records: list[Any], requests: list[dict[str, Any]]) -> Iterator[tuple[str, Any, str]]:
    """The records with the egress requests among them ("record" or "net", the item, where): each
    request just before the first record written after it, under the step of the call that made it
    (`setup` before any call)."""
    calls = 0
    for record in records:
        while requests and requests[0].get("ts", 0) <= record.ts:
            where = f"step {record.step:>2}" if record.kind == "tool" else "setup  " if not calls else "       "
            yield "net", requests.pop(0), where
        calls += record.kind == "tool"
        yield "record", record, ""
    for request in requests:
        yield "net", request, "       "


def _network_row(request: dict[str, Any], where: str) -> tuple[str, str]:
    target = literal(f"{request.get('method', '?')} {request.get('host', '?')}:{request.get('port', '?')}")
    if request.get("allowed"):
        result = f"[green]allowed[/] ↑{request.get('sent', 0)} B ↓{request.get('received', 0)} B"
    else:
        result = f"[red]refused[/] {literal(str(request.get('reason', '')))}"
    return ("setup" if where.strip() == "setup" else "", f"net {target} {result}")


def _network_line(console: Console, request: dict[str, Any], where: str) -> None:
    """A request through the session's egress proxy, under the step whose call made it."""
    target = literal(f"{request.get('method', '?')} {request.get('host', '?')}:{request.get('port', '?')}")
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


def render_summary(console: Console, result: RunResult) -> None:
    style = _STYLE.get(result.outcome, "bold red")
    lines = [
        f"outcome   [{style}]{result.outcome}[/]" + (f" — {literal(result.detail)}" if result.detail else ""),
        f"steps     {result.steps}{_by_subagents(result)}   verify rounds {result.verify_rounds}",
        f"tokens    in {result.tokens.get('input', 0)}  out {result.tokens.get('output', 0)}"
        f"  cached {result.tokens.get('cached', 0)}{_share(result.tokens)}{_estimated(result.tokens)}",
        f"cost      ${result.cost_usd:.4f}   elapsed {result.elapsed_s:.1f}s",
        f"session   {literal(result.session_id)}  ({literal(result.session_dir)})",
        f"patch     {literal(result.patch or '-')}",
    ]
    if result.evidence:
        lines.append(f"evidence  {literal(str(result.evidence))}")
    console.print(Panel("\n".join(lines), title="harness run", expand=False))


def _by_subagents(result: RunResult) -> str:
    return f" (+{result.subagent_steps} by sub-agents)" if result.subagent_steps else ""


def render_patch(console: Console, patch_path: str | None) -> None:
    if not patch_path or not Path(patch_path).is_file():
        return
    text = Path(patch_path).read_text(encoding="utf-8")
    if text.strip() and console.is_terminal:  # a terminal gets the patch's control characters spelled out
        console.print(Syntax(visible(text), "diff", theme="ansi_dark", background_color="default", word_wrap=True))
    elif text.strip():
        console.file.write(text)  # byte-exact when piped: a cropped line would corrupt the patch
    else:
        console.print("[dim](no changes)[/]")


def _args(arguments: dict[str, Any]) -> str:
    return ", ".join(f"{literal(str(k))}={_clip(repr(v), 60)}" for k, v in arguments.items())


def _clip(text: str, limit: int) -> str:
    """Shortened, its control characters made visible and escaped: model and tool text must never be
    read as rich markup, nor act on the terminal."""
    text = text.strip()
    return literal(text if len(text) <= limit else text[: limit - 1] + "…")
