"""Text from outside on its way to a terminal: control characters made visible, then escaped as data.

A model's words, a tool's output, an MCP server's answer, a path a repository named: any of them may
carry terminal escapes (`ESC[2J` clears the screen, `ESC]0;...` retitles the window, `ESC]8;;` makes
links), carriage returns that overwrite what was printed, or bidirectional overrides that show code
other than it is. Rich's `escape` stops markup only; `visible` shows every such character as its
`\\xNN` / `\\uNNNN` spelling, so what reaches the terminal is what was said, never what it does.
"""

from __future__ import annotations

from harness.visible import visible

TYPE_CHECKING = False  # typing's, without importing it: the quick path of `harness exec` prints through this
if TYPE_CHECKING:
    from typing import Any

    from rich.console import Console


def literal(text: str) -> str:
    """text made visible and escaped for Rich markup: safe to put inside a markup string."""
    from rich.markup import escape

    return escape(visible(text))


def visible_console(**options: Any) -> Console:
    """A rich Console that makes control characters visible in every string it renders (printed,
    or a table's or a panel's cell): no command can hand a terminal an escape it got from outside."""
    from rich.console import Console

    class Visible(Console):
        def render_str(self, text: str, **kwargs: Any) -> Any:
            return super().render_str(visible(text), **kwargs)

    return Visible(highlight=False, **options)


def write_visible(text: str) -> None:
    """A whole text on standard output as it is (never wrapped or cut), its control characters made
    visible, then a newline."""
    import sys

    sys.stdout.write(visible(text) + "\n")


def print_trimmed(console: Console, renderable: Any) -> None:
    """Print a renderable (a grid) without the spaces its cells pad each line with: lines end where
    their text does, in a terminal and in a file alike."""
    from rich.segment import Segment, Segments

    for line in console.render_lines(renderable, console.options, pad=False):
        segments = list(line)
        while segments and not segments[-1].control and not segments[-1].text.strip():
            segments.pop()
        if segments and not segments[-1].control:
            last = segments[-1]
            segments[-1] = Segment(last.text.rstrip(), last.style, last.control)
        console.print(Segments([*segments, Segment.line()]), end="", soft_wrap=True)


def print_columns(console: Console, header: list[str], rows: list[list[str]]) -> None:
    """A table as aligned plain columns, nothing cut: what a table prints when piped (a box drawn to
    the pipe's width would cut its references with an ellipsis)."""
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        line = "  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        console.print(visible(line), markup=False, highlight=False, soft_wrap=True)
