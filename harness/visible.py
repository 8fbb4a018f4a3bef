"""Text from outside made visible: a model's words, a tool's output, an MCP server's answer, a path a
repository named, a repository's instruction file. Any of them may carry terminal escapes (`ESC[2J`
clears the screen, `ESC]0;...` retitles the window), carriage returns that overwrite what was printed,
or invisible and bidirectional format characters that show a reader other words than are there.
`visible` spells every such character out (`\\x1b`, `\\u202e`), for a terminal (harness.cli.terminal)
and for a model reading a repository's words (harness.agent.instructions) alike."""

from __future__ import annotations

import re

_CONTROL = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]"
)
"""C0 (but tab and newline), DEL, C1, and the invisible or reordering format characters."""


def visible(text: str) -> str:
    """text with every control and bidirectional-format character spelled out (`\\x1b`, `\\u202e`)."""
    return _CONTROL.sub(_spelled, text)


def _spelled(found: re.Match[str]) -> str:
    code = ord(found.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
