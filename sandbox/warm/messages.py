"""The warm service's messages, typed: each request and reply a named tuple with its wire form.

Standard library only, and named tuples rather than dataclasses (`dataclasses`, with `inspect`, would
cost every client milliseconds; the quick path of `harness exec` goes further and speaks `wire` alone,
with the same checks). A message that arrives in a shape its type does not allow is a `ValueError`
naming the field, so neither side ever reads a key that is not there; the wire form is the JSON object
`protocol` frames.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

from sandbox.warm.wire import exec_reply

JSON = dict[str, Any]


def _text(data: JSON, key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        raise ValueError(f"{key} must be a string")
    return value


def _texts(data: JSON, key: str) -> list[str]:
    value = data.get(key)
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"{key} must be a list of strings")
    return list(value)


def _object(data: JSON, key: str) -> JSON:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise ValueError(f"{key} must be an object")
    return value


def _counts(data: JSON, key: str) -> dict[str, int]:
    value = _object(data, key)
    if not all(isinstance(count, int) for count in value.values()):
        raise ValueError(f"{key} must map names to counts")
    return dict(value)


# --- requests ---------------------------------------------------------------------------------


class ExecRequest(NamedTuple):
    """A one-shot call: argv on a fresh copy of the repository at the absolute path, in a container
    of spec (a `SandboxSpec` without labels, as JSON); the copy kept at keep afterwards if given."""

    path: str
    argv: list[str]
    spec: JSON = {}  # noqa: RUF012 - a named tuple's default, never mutated
    keep: str | None = None
    op: Literal["exec"] = "exec"


class StatusRequest(NamedTuple):
    """What the service has ready."""

    op: Literal["status"] = "status"


class StopRequest(NamedTuple):
    """Stop: remove everything started, then exit."""

    op: Literal["stop"] = "stop"


class LendRequest(NamedTuple):
    """A run slot for a new session whose tool calls use this run config (`loans.run_request`)."""

    run: JSON
    op: Literal["lend"] = "lend"


Request = ExecRequest | StatusRequest | StopRequest | LendRequest


def request_of(data: JSON) -> Request:
    """The request a wire object holds; ValueError when it is none the service knows."""
    op = data.get("op")
    if op == "exec":
        keep = data.get("keep")
        if keep is not None and not isinstance(keep, str):
            raise ValueError("keep must be a string")
        return ExecRequest(path=_text(data, "path"), argv=_texts(data, "argv"), spec=_object(data, "spec"), keep=keep)
    if op == "status":
        return StatusRequest()
    if op == "stop":
        return StopRequest()
    if op == "lend":
        run = _object(data, "run")
        if not {"spec", "mounts"} <= set(run):
            raise ValueError("a run request names its spec and mounts")
        return LendRequest(run=run)
    raise ValueError(f"unknown request {op!r}")


# --- replies ----------------------------------------------------------------------------------


class ExecReply(NamedTuple):
    """What a one-shot call did: its envelope (as JSON) and the envelope's headline."""

    envelope: JSON
    headline: str


class ErrorReply(NamedTuple):
    """The call could not run at all; exit_code is the class's (`sandbox.exit_code.ExitCode`)."""

    error: str
    exit_code: int


class StatusReply(NamedTuple):
    """The service's process, what it keeps ready per image, the images it serves and its run slots."""

    pid: int
    ready: dict[str, int] = {}  # noqa: RUF012 - named tuples' defaults, never mutated
    images: list[str] = []  # noqa: RUF012
    runs: dict[str, int] = {}  # noqa: RUF012


class StopReply(NamedTuple):
    stopping: bool = True


class LoanReply(NamedTuple):
    """A lent run slot: its folder, and its containers' ids in the order of the passed descriptors."""

    slot: str
    containers: list[str]


class Refused(NamedTuple):
    """The service will not do what was asked (the client takes the cold path)."""

    refused: str


Reply = ExecReply | ErrorReply | StatusReply | StopReply | LoanReply | Refused


def wire(message: Request | Reply) -> JSON:
    """The JSON object of a message."""
    return message._asdict()


def exec_reply_of(data: JSON) -> ExecReply | ErrorReply:
    """The reply to an ExecRequest; ValueError when it is malformed (`wire.exec_reply` checks it)."""
    checked = exec_reply(data)
    if "error" in checked:
        return ErrorReply(error=checked["error"], exit_code=checked["exit_code"])
    return ExecReply(envelope=checked["envelope"], headline=checked["headline"])


def status_reply_of(data: JSON) -> StatusReply:
    """The reply to a StatusRequest; ValueError when it is malformed."""
    pid = data.get("pid")
    if not isinstance(pid, int):
        raise ValueError("pid must be a number")
    return StatusReply(pid=pid, ready=_counts(data, "ready"), images=_texts(data, "images"), runs=_counts(data, "runs"))


def loan_reply_of(data: JSON) -> LoanReply:
    """The reply to a LendRequest; ValueError when it is malformed."""
    return LoanReply(slot=_text(data, "slot"), containers=_texts(data, "containers"))
