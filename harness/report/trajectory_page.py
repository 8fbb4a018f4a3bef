"""One session's trajectory as a page: every step's model text, each tool call with its arguments,
the gate's decision and rule, the envelope (exit code first), the step's diff, context events,
tokens and cost so far, the verify rounds, the outcome and the final patch."""

from __future__ import annotations

import datetime
import json
from collections.abc import Sequence
from typing import Any

from harness import readback
from harness.report import charts
from harness.report.html import esc, page, table
from harness.report.session_view import SessionView, StepView, SubagentView, subagent_steps
from harness.trajectory import HookRecord, ToolRecord, VerifyRecord


def render(view: SessionView, *, back: str | None = None, review: Sequence[str] = ()) -> str:
    """The page of view; back is a relative link to the report that lists it; review, lines about
    its place in a batch (overlaps, how to land it)."""
    start = view.start
    parts = []
    if back:
        parts.append(f'<p><a href="{esc(back)}">&larr; report</a></p>')
    facts = [
        ("session", esc(view.session_id)),
        ("task", f"<pre>{esc(start.task)}</pre>" if start else '<span class="muted">unknown</span>'),
        ("model", esc(start.model) if start else ""),
        ("repository", esc(start.repo) if start else ""),
        ("started", esc(_when(start.ts)) if start else ""),
        ("outcome", _outcome(view)),
        ("steps", str(len([s for s in view.steps if s.turn is not None])) + _by_subagents(view)),
        ("cost", f"${view.cost_usd:.4f}"),
        *[(name, esc(value)) for name, value in view.totals],
    ]
    parts.append(_kv(facts))
    parts += [f'<p class="review">{esc(line)}</p>' for line in review]
    if view.live:
        parts.append(
            '<p class="banner">This session has no outcome yet: it is still running, or it stopped without '
            "one (resume it with <code>harness resume</code>). Reload to see new steps when served with "
            "<code>harness view --serve</code>; a written page shows the steps as of "
            f"{esc(_when(None))}.</p>"
        )
    parts += [f'<p class="bad">{esc(problem)}</p>' for problem in view.problems]
    for event in view.events:
        parts.append(f'<p class="muted">event <b>{esc(event.event)}</b>: {esc(event.detail)}</p>')
    if view.attempts is not None:
        parts.append(_attempts(view.attempts))
    if view.family:
        parts.append(_family(view))
    if view.network:
        parts.append(_network(view.network))
    parts.append(_chart(view))
    parts.append(
        '<div class="toolbar"><label><input type="checkbox" id="only-failed"> only failed calls</label> '
        '<span class="muted">keys: j/k next/previous step, g/G first/last, e next failed call, '
        "f failed only, d final patch</span></div>"
    )
    parts += [_step(step) for step in view.steps]
    parts.append('<section id="patch" tabindex="-1"><h2>Final patch</h2>')
    parts.append(_diff(view.patch) if view.patch.strip() else '<p class="muted">no change</p>')
    parts.append("</section>")
    title = f"harness · {view.session_id}"
    return page(title, "\n".join(parts), heading=f"Trajectory of {view.session_id}")


def _network(requests: list[dict[str, Any]]) -> str:
    """Every request through the session's egress proxy: where, what, allowed or refused and why."""
    refused = sum(1 for r in requests if not r.get("allowed"))
    rows = []
    for request in requests:
        allowed = bool(request.get("allowed"))
        verdict = (
            '<span class="ok">allowed</span>'
            if allowed
            else f'<span class="bad">refused</span> {esc(str(request.get("reason", "")))}'
        )
        rows.append(
            [
                (esc(str(request.get("step", ""))), str(request.get("step", ""))),
                (esc(str(request.get("method", ""))), str(request.get("method", ""))),
                (esc(f"{request.get('host', '')}:{request.get('port', '')}"), str(request.get("host", ""))),
                (verdict, int(allowed)),
                (str(request.get("sent", 0)), int(request.get("sent", 0))),
                (str(request.get("received", 0)), int(request.get("received", 0))),
            ]
        )
    heading = f"<h2>Network ({len(requests)} request(s), {refused} refused)</h2>"
    return heading + table(["step", "method", "host", "verdict", "bytes sent", "bytes received"], rows)


def _attempts(found: dict[str, Any]) -> str:
    """A run of attempts side by side: each one's session, outcome, change, steps and cost; the chosen
    one marked, and why it was chosen."""
    rows = []
    for entry in readback.items(found.get("attempts")):
        attempt = readback.mapping(entry)
        name, outcome = readback.string(attempt.get("name")), readback.string(attempt.get("outcome")) or "not ended"
        files = readback.items(attempt.get("files"))
        lines = readback.count(attempt.get("lines_changed"))
        chosen = attempt.get("chosen") is True
        css = "ok" if outcome == "verified" else "warn" if outcome in ("interrupted", "refused") else "bad"
        said = f'<span class="badge {css}">{esc(outcome)}</span>'
        if outcome in ("interrupted", "refused"):
            said += f" {esc(readback.string(attempt.get('detail')))}"
        rows.append(
            [
                (esc(name) + (' <span class="badge ok">chosen</span>' if chosen else ""), name),
                (esc(readback.string(attempt.get("session_id"))), readback.string(attempt.get("session_id"))),
                (said, outcome),
                (esc(f"{len(files)} file(s), {lines} line(s)") if files else '<span class="muted">none</span>', lines),
                (str(readback.count(attempt.get("steps"))), readback.count(attempt.get("steps"))),
                (f"${readback.amount(attempt.get('cost_usd')):.4f}", readback.amount(attempt.get("cost_usd"))),
            ]
        )
    why = readback.string(found.get("why"))
    select = readback.string(found.get("select"))
    said = f"<p>chosen: {esc(why)} (select {esc(select)})</p>" if why else '<p class="muted">no attempt chosen yet</p>'
    heading = f"<h2>Attempts ({len(rows)})</h2>"
    return (
        f'<section id="attempts">{heading}{said}'
        + table(["attempt", "session", "outcome", "change", "steps", "cost"], rows)
        + "</section>"
    )


def _family(view: SessionView) -> str:
    """The tree of forks as nested lists (the page's policy allows no inline style): each session
    with its outcome and the step where it parted from its parent."""
    html, depth = ["<ul>"], 0
    for index, relative in enumerate(view.family):
        if index:
            html.append("</li>")
        while depth < relative.depth:
            html.append("<ul>")
            depth += 1
        while depth > relative.depth:
            html.append("</ul></li>")
            depth -= 1
        me = relative.session_id == view.session_id and relative.folder.name in (view.folder.name, view.session_id)
        name = f"<b>{esc(relative.session_id)}</b> (this session)" if me else esc(relative.session_id)
        css = "ok" if relative.outcome == "verified" else "warn" if relative.outcome.startswith("running") else "bad"
        parted = f"forked at step {relative.at} · " if relative.at is not None else "the root · "
        html.append(
            f'<li class="fork">{parted}{name} <span class="badge {css}">{esc(relative.outcome)}</span> '
            f'<span class="muted">{esc(str(relative.folder))}</span>'
        )
    html.append("</li>" + "</ul></li>" * depth + "</ul>")
    return f'<section id="family"><h2>Family ({len(view.family)} sessions)</h2>{"".join(html)}</section>'


def _outcome(view: SessionView) -> str:
    outcome = view.outcome
    if view.no_run:
        return '<span class="badge warn">no model run</span>'
    if outcome is None:
        return '<span class="badge warn">running or unfinished</span>'
    css = "ok" if outcome.outcome == "verified" else "bad"
    text = f'<span class="badge {css}">{esc(outcome.outcome)}</span> exit {outcome.exit_code}'
    if outcome.detail:
        text += f" · {esc(outcome.detail)}"
    if outcome.evidence:
        text += f"<pre>{esc(_dump(outcome.evidence))}</pre>"
    return text


def _chart(view: SessionView) -> str:
    steps = [s for s in view.steps if s.committed is not None]
    return charts.per_step(
        "Tokens and cost per step",
        [s.step for s in steps],
        [float(s.sent_tokens) for s in steps],
        [s.committed.cost_usd if s.committed else 0.0 for s in steps],
    )


def _by_subagents(view: SessionView) -> str:
    taken = subagent_steps(view)
    return f" (+{taken} by sub-agents)" if taken else ""


def _subagent(child: SubagentView) -> str:
    """A sub-agent under the step that started it: what it was asked, its reserve, its steps (its own
    sub-agents inside them), how it ended and what became of its change."""
    start, end = child.start, child.end
    if end is None:
        said = '<span class="warn">no end recorded (running, or cut short: resume it)</span>'
    else:
        css = "bad" if end.change == "conflict" else "ok" if end.change == "applied" else "muted"
        said = (
            f'{esc(end.outcome)} · <span class="{css}">{esc(end.change_text)}</span> <span class="muted">'
            f"{end.steps} steps, {end.input_tokens} in / {end.output_tokens} out tokens, ${end.cost_usd:.4f}</span>"
        )
    parts = [
        f'<details class="subagent" open><summary>sub-agent <b>{esc(child.name)}</b> · {said}</summary>',
        _kv(
            [
                ("task", f"<pre>{esc(start.task)}</pre>"),
                ("reserve", esc(start.reserve_text)),
                ("session", esc(start.session)),
            ]
        ),
        *[_step(step, prefix=f"{child.name}-") for step in child.steps],
    ]
    if end is not None and end.final.strip():
        parts.append(f'<p class="muted">its final message</p><pre class="model-text">{esc(end.final)}</pre>')
    parts.append("</details>")
    return "\n".join(parts)


def _step(step: StepView, prefix: str = "") -> str:
    classes = "step has-failed" if step.failed else "step"
    committed = step.committed
    so_far = (
        f"{committed.input_tokens} in / {committed.output_tokens} out tokens, ${committed.cost_usd:.4f} so far"
        if committed
        else "not committed yet"
    )
    who = f"{prefix.rstrip('-')} " if prefix else ""
    parts = [
        f'<section class="{classes}" id="step-{esc(prefix)}{step.step}" tabindex="-1">',
        f'<h2>{esc(who)}Step {step.step} <span class="muted">· {esc(so_far)} · ~{step.sent_tokens} tokens sent</span></h2>',
    ]
    for summary in step.summaries:
        excluded = "".join(f"<li>{esc(d)}</li>" for d in summary.excluded)
        parts.append(
            f'<div class="summary"><h3>Context summary of model turns 1-{summary.through_turn} '
            f'<span class="muted">~{summary.before_tokens} &rarr; ~{summary.after_tokens} tokens, '
            f"{summary.input_tokens} in / {summary.output_tokens} out, ${summary.cost_usd:.4f}</span></h3>"
            f"<pre>{esc(summary.text)}</pre>"
            + (f"<p>Excluded directions so far:</p><ul>{excluded}</ul>" if excluded else "")
            + "</div>"
        )
    turn = step.turn
    if turn is not None:
        meta = f"stop: {turn.stop_reason}, {turn.usage.output_tokens} tokens out, {turn.latency_ms} ms"
        parts.append(f'<p class="muted">model {esc(turn.model)} · {esc(meta)}</p>')
        if turn.text.strip():
            parts.append(f'<pre class="model-text">{esc(turn.text)}</pre>')
        elif not turn.tool_calls:
            parts.append('<p class="muted">(empty reply)</p>')
    parts += [_call(call) for call in step.calls]
    parts += [_subagent(child) for child in step.subagents]
    parts += [_hook(hook) for hook in step.hooks]
    for event in step.events:
        parts.append(f'<p class="muted">event <b>{esc(event.event)}</b>: {esc(event.detail)}</p>')
    if step.diff or step.diff_note:
        parts.append("<h3>Change in this step</h3>")
        if step.diff:
            parts.append(_diff(step.diff))
        if step.diff_note:
            parts.append(f'<p class="muted">{esc(step.diff_note)}</p>')
    parts += [_verify(round_) for round_ in step.verify]
    parts.append("</section>")
    return "\n".join(parts)


def _call(call: ToolRecord) -> str:
    failed = call.is_error
    exited = call.envelope.exit_code if call.envelope is not None else 0
    # a command that ran and exited non-zero (tests that fail) is no tool error, and no success either
    status = f"ERROR[{call.error_kind}]" if failed else f"exit {exited}" if exited else "ok"
    css = "bad" if failed or exited else "ok"
    attempt = f" · re-run {call.attempt}" if call.attempt else ""
    summary = (
        f'<summary><b>{esc(call.name)}</b> <span class="{css}">{esc(status)}</span> '
        f'<span class="muted">{call.duration_ms} ms{esc(attempt)}</span></summary>'
    )
    facts = [("arguments", f"<pre>{esc(_dump(call.arguments))}</pre>")]
    if call.decision is not None:
        d = call.decision
        facts.append(("gate", f"<b>{esc(d.action)}</b> by rule <code>{esc(d.rule)}</code> · {esc(d.reason)}"))
    envelope = call.envelope
    if envelope is not None:
        facts.append(("exit code", f'<b class="{"ok" if envelope.exit_code == 0 else "bad"}">{envelope.exit_code}</b>'))
        facts.append(("status", esc(envelope.status)))
        facts.append(("duration", f"{envelope.duration_ms} ms"))
        for name, text, dropped in (
            ("stdout", envelope.stdout, envelope.stdout_dropped),
            ("stderr", envelope.stderr, envelope.stderr_dropped),
        ):
            if text or dropped:
                note = f'<p class="warn">truncated: {dropped} bytes left out</p>' if dropped else ""
                facts.append((name, f"<pre>{esc(text)}</pre>{note}"))
        if envelope.truncated and not (envelope.stdout_dropped or envelope.stderr_dropped):
            facts.append(("output", '<span class="warn">truncated</span>'))
    facts.append(("the model read", f"<pre>{esc(call.text)}</pre>"))
    classes = "call failed" if failed else "call"
    open_ = " open" if failed else ""
    who = f"{call.agent}-" if call.agent else ""  # a sub-agent's call ids may repeat its parent's
    return f'<details class="{classes}" id="call-{esc(who + call.call_id)}-{call.attempt}"{open_}>{summary}{_kv(facts)}</details>'


def _hook(hook: HookRecord) -> str:
    """One hook's run: its event and target, what it decided and why, whose it was."""
    css = {"block": "bad", "failed": "warn"}.get(hook.verdict, "muted")
    target = f" {esc(hook.tool_name)}" if hook.tool_name else ""
    why = f": {esc(hook.reason)}" if hook.reason else ""
    changed = ' <span class="warn">(changed the input)</span>' if hook.updated_input is not None else ""
    changed += f' <span class="warn">({esc(hook.bounds)})</span>' if hook.bounds else ""
    return (
        f'<p class="hook">hook <b>{esc(hook.event)}</b>{target} <span class="{css}">{esc(hook.verdict)}</span>{why}'
        f'{changed} <span class="muted">({esc(hook.whose)}) <code>{esc(hook.command)}</code> '
        f"exit {hook.exit_code}, {hook.duration_ms} ms</span></p>"
    )


def _verify(round_: VerifyRecord) -> str:
    css = "ok" if round_.passed else "bad"
    head = (
        f"<h3>Verify round {round_.round}{_layer(round_)}: "
        f'<span class="{css}">{"passed" if round_.passed else "failed"}</span> '
        f'<span class="muted">exit {round_.exit_code}, {esc(round_.status)}, {round_.duration_ms} ms</span></h3>'
    )
    failing = ""
    if round_.failing:
        failing = "<p>failing: " + ", ".join(f"<code>{esc(name)}</code>" for name in round_.failing) + "</p>"
    return head + failing + (f"<pre>{esc(round_.output)}</pre>" if round_.output else "")


def _layer(round_: VerifyRecord) -> str:
    return "" if round_.layer == "verify" else f" ({esc(round_.layer)}: <code>{esc(round_.command)}</code>)"


def _diff(text: str) -> str:
    lines = []
    for line in text.splitlines():
        if line.startswith(("+++", "---", "diff ", "index ")):
            lines.append(f"<b>{esc(line)}</b>")
        elif line.startswith("@@"):
            lines.append(f'<span class="hunk">{esc(line)}</span>')
        elif line.startswith("+"):
            lines.append(f'<span class="add">{esc(line)}</span>')
        elif line.startswith("-"):
            lines.append(f'<span class="del">{esc(line)}</span>')
        else:
            lines.append(esc(line))
    return '<pre class="diff">' + "\n".join(lines) + "</pre>"


def _kv(facts: list[tuple[str, str]]) -> str:
    return '<dl class="kv">' + "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in facts) + "</dl>"


def _dump(value: object) -> str:
    return json.dumps(value, indent=1, ensure_ascii=False, default=str)


def _when(stamp: float | None) -> str:
    moment = datetime.datetime.now() if stamp is None else datetime.datetime.fromtimestamp(stamp)
    return moment.strftime("%Y-%m-%d %H:%M:%S")
