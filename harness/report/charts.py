"""Charts as inline SVG (no script, no external file): labelled horizontal bars, a histogram, and a
per-step bar-and-line chart. Every label is escaped; an empty series draws a note, not an error."""

from __future__ import annotations

from collections.abc import Sequence

from harness.report.html import esc

_W = 420


def _empty(title: str) -> str:
    return f'<figure><figcaption>{esc(title)}</figcaption><p class="muted">nothing to draw</p></figure>'


def _number(value: float) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def bars(title: str, items: Sequence[tuple[str, float]], *, unit: str = "", kind: str = "") -> str:
    """One horizontal bar per (label, value), longest first as given."""
    if not items:
        return _empty(title)
    top = max(value for _, value in items) or 1
    row, left, width = 20, 170, _W - 170 - 60
    parts = []
    for index, (label, value) in enumerate(items):
        y = index * row
        length = max(1.0, width * value / top) if value else 0.0
        shown = label if len(label) <= 28 else label[:27] + "…"
        parts.append(
            f"<g><title>{esc(label)}: {esc(_number(value))}{esc(unit)}</title>"
            f'<text x="{left - 6}" y="{y + 14}" text-anchor="end">{esc(shown)}</text>'
            f'<rect class="bar {esc(kind)}" x="{left}" y="{y + 3}" width="{length:.1f}" height="{row - 6}"></rect>'
            f'<text x="{left + length + 4:.1f}" y="{y + 14}">{esc(_number(value))}{esc(unit)}</text></g>'
        )
    height = row * len(items) + 4
    return (
        f"<figure><figcaption>{esc(title)}</figcaption>"
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{height}" viewBox="0 0 {_W} {height}" '
        f'role="img" aria-label="{esc(title)}">{"".join(parts)}</svg></figure>'
    )


def histogram(title: str, values: Sequence[float], *, bins: int = 10, unit: str = "") -> str:
    """How values are distributed: counts over equal-width bins from the smallest to the largest."""
    if not values:
        return _empty(title)
    low, high = min(values), max(values)
    if high == low:
        return bars(title, [(f"{_number(low)}{unit}", float(len(values)))])
    count = min(bins, max(1, len(set(values))))
    step = (high - low) / count
    counts = [0] * count
    for value in values:
        counts[min(count - 1, int((value - low) / step))] += 1
    height, base, left, width = 150, 125, 30, _W - 40
    slot = width / count
    parts = [f'<line class="axis" x1="{left}" y1="{base}" x2="{left + width}" y2="{base}"></line>']
    top = max(counts)
    for index, n in enumerate(counts):
        x = left + index * slot
        h = (base - 15) * n / top
        lo, hi = low + index * step, low + (index + 1) * step
        parts.append(
            f"<g><title>{esc(_number(lo))}–{esc(_number(hi))}{esc(unit)}: {n}</title>"
            f'<rect class="bar" x="{x + 1:.1f}" y="{base - h:.1f}" width="{slot - 2:.1f}" height="{h:.1f}"></rect>'
            + (f'<text x="{x + slot / 2:.1f}" y="{base - h - 3:.1f}" text-anchor="middle">{n}</text>' if n else "")
            + "</g>"
        )
    parts.append(f'<text x="{left}" y="{base + 16}">{esc(_number(low))}{esc(unit)}</text>')
    parts.append(f'<text x="{left + width}" y="{base + 16}" text-anchor="end">{esc(_number(high))}{esc(unit)}</text>')
    return (
        f"<figure><figcaption>{esc(title)}</figcaption>"
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{height}" viewBox="0 0 {_W} {height}" '
        f'role="img" aria-label="{esc(title)}">{"".join(parts)}</svg></figure>'
    )


def per_step(title: str, steps: Sequence[int], bars_of: Sequence[float], line_of: Sequence[float]) -> str:
    """Bars (e.g. tokens sent at each step) with a line over them (e.g. cost so far), one scale each."""
    if not steps:
        return _empty(title)
    width, height, base, left = max(_W, min(1200, 14 * len(steps) + 60)), 170, 140, 40
    slot = (width - left - 10) / len(steps)
    top_bar, top_line = max(bars_of) or 1, max(line_of) or 1
    parts = [f'<line class="axis" x1="{left}" y1="{base}" x2="{width - 10}" y2="{base}"></line>']
    points = []
    for index, (step, bar, line) in enumerate(zip(steps, bars_of, line_of, strict=True)):
        x = left + index * slot
        h = (base - 20) * bar / top_bar
        parts.append(
            f"<g><title>step {step}: {esc(_number(bar))} tokens, ${line:.4f} so far</title>"
            f'<rect class="bar" x="{x + 1:.1f}" y="{base - h:.1f}" width="{max(1.0, slot - 2):.1f}" '
            f'height="{h:.1f}"></rect></g>'
        )
        points.append(f"{x + slot / 2:.1f},{base - (base - 20) * line / top_line:.1f}")
    parts.append(f'<polyline class="line" points="{" ".join(points)}"></polyline>')
    parts.append(f'<text x="{left}" y="{base + 16}">step {steps[0]}</text>')
    parts.append(f'<text x="{width - 10}" y="{base + 16}" text-anchor="end">step {steps[-1]}</text>')
    legend = f"bars: tokens sent (max {_number(max(bars_of))}); line: cost so far (max ${max(line_of):.4f})"
    parts.append(f'<text x="{left}" y="12">{esc(legend)}</text>')
    return (
        f"<figure><figcaption>{esc(title)}</figcaption>"
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{esc(title)}">{"".join(parts)}</svg></figure>'
    )


def steps(title: str, points: Sequence[tuple[float, float]], *, end: float, unit: str = "s") -> str:
    """A value that holds until it changes (e.g. a limit over time): (x, value) points in x order,
    drawn as a step line up to `end`."""
    if not points:
        return _empty(title)
    height, base, left, width = 150, 125, 30, _W - 40
    span = max(end, points[-1][0]) - points[0][0] or 1.0
    top = max(value for _, value in points) or 1

    def x(at: float) -> float:
        return left + width * (at - points[0][0]) / span

    def y(value: float) -> float:
        return base - (base - 15) * value / top

    path, previous = [], None
    for at, value in points:
        if previous is not None:
            path.append(f"{x(at):.1f},{y(previous):.1f}")
        path.append(f"{x(at):.1f},{y(value):.1f}")
        previous = value
    path.append(f"{x(max(end, points[-1][0])):.1f},{y(points[-1][1]):.1f}")
    parts = [
        f'<line class="axis" x1="{left}" y1="{base}" x2="{left + width}" y2="{base}"></line>',
        f'<polyline class="line" points="{" ".join(path)}"></polyline>',
        f'<text x="{left - 4}" y="{y(top) + 4:.1f}" text-anchor="end">{esc(_number(top))}</text>',
        f'<text x="{left}" y="{base + 16}">0 {esc(unit)}</text>',
        f'<text x="{left + width}" y="{base + 16}" text-anchor="end">{esc(_number(span))} {esc(unit)}</text>',
    ]
    for at, value in points:
        parts.append(
            f"<g><title>{esc(_number(at - points[0][0]))} {esc(unit)}: {esc(_number(value))}</title>"
            f'<circle cx="{x(at):.1f}" cy="{y(value):.1f}" r="3"></circle></g>'
        )
    return (
        f"<figure><figcaption>{esc(title)}</figcaption>"
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{height}" viewBox="0 0 {_W} {height}" '
        f'role="img" aria-label="{esc(title)}">{"".join(parts)}</svg></figure>'
    )
