"""What both streaming providers share: the SDK timeout (its read timeout is the stall detector) and
draining a stream into an assembly while turning every failure into a ModelError that carries the
usage seen so far (so failed calls are billed too)."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager as ContextManager
from typing import Any

import httpx2

from harness.errors import ModelError, ModelUnavailable, ModelUnreachable
from harness.providers.config import ProviderConfig, host_of, redact
from harness.types import Usage


def sdk_timeout(config: ProviderConfig, limit_s: float | None = None) -> httpx2.Timeout:
    """The read timeout is the first-token limit until the answer starts (`answer_started` makes it
    the stall limit for the body). With `limit_s` (what the caller has left) no part of the call may
    wait longer than that."""
    cap, limits = call_timeout(config, limit_s), config.timeouts()
    return httpx2.Timeout(cap, connect=min(limits.connect_s, cap), read=min(limits.first_token_s, cap))


def call_timeout(config: ProviderConfig, limit_s: float | None) -> float:
    """The whole call's bound: the endpoint's timeout, or less when the caller has less left."""
    total = config.timeouts().total_s
    return total if limit_s is None else max(0.001, min(total, limit_s))


def answer_started(response: httpx2.Response, stall_s: float) -> None:
    """The answer's headers came: from here on, no bytes for `stall_s` is a stalled stream. (The
    transport reads the request's read timeout when it starts reading the body, which has not
    started yet: the body's reads get this limit, the wait for the headers had the first-token one.)"""
    timeout = response.request.extensions.get("timeout")
    if isinstance(timeout, dict):
        timeout["read"] = stall_s


def drain(
    open_stream: Callable[[httpx2.Timeout], ContextManager[Any]],
    add: Callable[[Any], None],
    usage: Callable[[], Usage | None],
    *,
    config: ProviderConfig,
    limit_s: float | None,
    foreign: tuple[type[BaseException], ...],
    translate: Callable[[BaseException, str], ModelError],
) -> int:
    """Feed every event of the stream to `add`; return the call's latency in ms.

    The whole call is bounded by the endpoint's timeout, or by `limit_s` (what the caller has left)
    when that is shorter; `open_stream` gets the SDK timeout with the same bound, so none of the
    SDK's own waits outlasts it: the first-token limit until the answer starts, the stall limit
    after. SDK and transport errors (`foreign`) are translated, told which silence ended the call.
    """
    bound, timeout_s = sdk_timeout(config, limit_s), call_timeout(config, limit_s)
    limits = config.timeouts()
    stall_s = min(limits.stall_s, timeout_s)
    where = "the local server's" if limits.local else "the endpoint's"
    silence = f"its answer did not start within {where} first-token limit of {bound.read or timeout_s:.3g}s"
    started = time.monotonic()
    try:
        opened = open_stream(bound)
        silence = f"no data for {stall_s:.3g}s, {where} stall limit"
        response = getattr(opened, "response", None)
        if isinstance(response, httpx2.Response):
            answer_started(response, stall_s)
        with opened as stream:
            for event in stream:
                add(event)
                if time.monotonic() - started > timeout_s:
                    raise ModelUnavailable(f"model call exceeded its {timeout_s:.3g}s timeout")
    except ModelError as error:
        raise error.with_usage(usage()) from error.__cause__
    except foreign as error:
        raise translate(error, silence).with_usage(usage()) from None
    return int((time.monotonic() - started) * 1000)


def transport_error(
    error: BaseException,
    *,
    timeouts: tuple[type[BaseException], ...],
    unreachable: tuple[type[BaseException], ...],
    secret: str | None,
    silence: str,
    endpoint: str,
) -> ModelError | None:
    """The translation both SDKs share: a timeout or stall, or an endpoint that cannot be reached
    (both retryable, the key redacted); None for any other error."""
    cause = error.__cause__ or error
    if isinstance(cause, httpx2.ConnectTimeout):
        return ModelUnreachable(redact(f"the model endpoint {endpoint} accepted no connection in time", secret))
    if isinstance(error, (*timeouts, httpx2.TimeoutException)):
        return ModelUnavailable(f"model endpoint timed out or stalled ({silence or 'no data'})")
    if isinstance(error, (*unreachable, httpx2.TransportError)):
        address = refused_here(cause, endpoint)
        if address:
            unreachable_error = ModelUnreachable(
                redact(f"nothing listens on {address} (the model server of {endpoint} is not running there)", secret)
            )
            unreachable_error.nothing_listens = True
            return unreachable_error
        return ModelUnreachable(
            redact(f"cannot reach the model endpoint {endpoint}: {cause}".replace("  ", " "), secret)
        )
    return None


def refused_here(cause: BaseException, endpoint: str) -> str:
    """`HOST:PORT` when a connection to a loopback address of endpoint was refused, else ""."""
    if not isinstance(cause, httpx2.ConnectError):
        return ""
    refused = isinstance(cause.__context__, ConnectionRefusedError) or "refused" in str(cause).lower()
    host = host_of(endpoint)
    return f"{host.name}:{host.port}" if refused and host is not None and host.loopback else ""
