"""Server-sent events read off a streamed HTTP body, and what a streamed answer was: events, a whole
JSON body from a server that ignored `stream: true`, or the end marker.

The SDKs make the request (auth, URL, HTTP status errors); the body is read here, so an adapter
can tell a stream that reached `data: [DONE]` from one that was cut off, see an error object sent
after a 200 with the usage it carried, and take a non-streamed completion as the answer it is.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from harness.errors import ModelBadResponse


@dataclass(frozen=True)
class WireItem:
    """One thing a streamed answer said."""

    kind: Literal["data", "done", "whole"]
    """data: one event's JSON; done: the end marker (`data: [DONE]`); whole: a non-streamed body."""
    payload: Any = None
    event: str | None = None
    """The SSE `event:` name, when the server sent one."""


def events(lines: Iterable[str]) -> Iterator[tuple[str | None, str]]:
    """(event name, data) per SSE event; comments and other fields are skipped."""
    event: str | None = None
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield event, "\n".join(data)
            event, data = None, []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            event = value
        elif field == "data":
            data.append(value)
    if data:
        yield event, "\n".join(data)


def read_body(lines: Iterable[str], whole: bytes | None) -> Iterator[WireItem]:
    """The items of one answer: `whole` (already read) when the server answered with one JSON body."""
    if whole is not None:
        yield WireItem("whole", _json(whole.decode("utf-8", "replace"), "response body"))
        return
    for event, data in events(lines):
        if data.strip() == "[DONE]":
            yield WireItem("done")
            return
        yield WireItem("data", _json(data, "stream event"), event)


def is_whole_json(content_type: str) -> bool:
    """True for an application/json answer (a server that ignored `stream: true`)."""
    kind = content_type.split(";", 1)[0].strip().lower()
    return kind.endswith("json") and "event-stream" not in kind


def refuse_unreadable(content_type: str, response: Any) -> None:
    """A 200 that is neither a stream nor JSON (a proxy's or captive portal's HTML login page, a
    plain-text banner) is no answer and not an outage: say what came back, once, never retried."""
    kind = content_type.split(";", 1)[0].strip().lower()
    if not kind.startswith("text/") or kind == "text/event-stream":
        return  # a stream, JSON, or a cloud's binary framing (Bedrock's vnd.amazon.eventstream)
    try:
        head = response.read()[:200].decode("utf-8", "replace")
    except Exception:  # noqa: BLE001 - the body is only quoted; an unreadable one is quoted as empty
        head = ""
    shown = " ".join(head.split())[:120]
    raise ModelBadResponse(
        f"the model endpoint answered 200 with {kind}, not a model stream (a proxy or login page?): {shown!r}"
    )


def _json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        raise ModelBadResponse(f"the model endpoint sent a {what} that is not JSON: {text[:200]!r}") from None
