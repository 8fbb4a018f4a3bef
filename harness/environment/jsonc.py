"""JSON with comments and trailing commas (what devcontainer.json and a feature's metadata are), read
in time linear in its size.

A repository's file is hostile input: a general JSON5 reader written in Python spends seconds to
minutes of this machine's CPU on a few hundred KiB of small objects. The comments (`//`, `/* */`)
and the commas before a closing bracket are taken out in one pass (strings kept as they are), and
what is left is read by the standard library's JSON reader; nesting past MAX_DEPTH is refused.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_DEPTH = 64
"""A devcontainer.json nests a few levels; deeper is refused before it is read."""
_NEXT = re.compile(r'["/,\[\]{}]')
_STRING = re.compile(r'(?:[^"\\\n]|\\.)*"')
_SPACE = re.compile(r"\s*")


class JsoncError(ValueError):
    """The text is not JSON with comments (the message says where)."""


def loads(text: str) -> Any:
    """The value of JSON-with-comments text; JsoncError naming the first problem."""
    try:
        return json.loads(plain(text))
    except RecursionError:
        raise JsoncError(f"it nests deeper than {MAX_DEPTH} levels") from None
    except json.JSONDecodeError as error:
        raise JsoncError(str(error)) from None


def plain(text: str) -> str:
    """The same text as plain JSON: comments blanked, trailing commas dropped."""
    out: list[str] = []
    depth = 0
    start = position = 0
    comma: int | None = None  # where in out the last comma is while nothing but space followed it

    def emit(piece: str) -> None:
        nonlocal comma
        if comma is not None and not _SPACE.fullmatch(piece):
            comma = None  # a value came after it
        out.append(piece)

    while True:
        found = _NEXT.search(text, position)
        if found is None:
            emit(text[start:])
            return "".join(out)
        at, char = found.start(), found.group()
        if char == '"':
            closed = _STRING.match(text, at + 1)
            if closed is None:
                raise JsoncError(f"a string that does not end at character {at}")
            position = closed.end()
            continue
        if char == "/":
            following = text[at + 1 : at + 2]
            if following == "/":
                end = text.find("\n", at)
                end = len(text) if end == -1 else end
            elif following == "*":
                end = text.find("*/", at + 2)
                if end == -1:
                    raise JsoncError(f"a comment that does not end at character {at}")
                end += 2
            else:
                position = at + 1
                continue
            emit(text[start:at])
            out.append(" ")
            start = position = end
            continue
        emit(text[start:at])
        if char == ",":
            comma = len(out)
        elif char in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise JsoncError(f"it nests deeper than {MAX_DEPTH} levels")
        else:
            depth -= 1
            if comma is not None:
                out[comma] = ""  # a trailing comma: only space and comments since it
        out.append(char)
        if char != ",":
            comma = None
        start = position = at + 1
