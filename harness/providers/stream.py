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
from harness.providers.config import ProviderConfig, redact
from harness.types import Usage


def sdk_timeout(config: ProviderConfig, limit_s: float | None = None) -> httpx2.Timeout:
    """The read timeout is the stall detector: no bytes for `stall_timeout_s` = a timeout. With
    `limit_s` (what the caller has left) no part of the call may wait longer than that."""
    cap = call_timeout(config, limit_s)
    return httpx2.Timeout(cap, connect=min(config.connect_timeout_s, cap), read=min(config.stall_timeout_s, cap))


def call_timeout(config: ProviderConfig, limit_s: float | None) -> float:
    """The whole call's bound: the provider's timeout, or less when the caller has less left."""
    return config.timeout_s if limit_s is None else max(0.001, min(config.timeout_s, limit_s))


def drain(
    open_stream: Callable[[httpx2.Timeout], ContextManager[Any]],
    add: Callable[[Any], None],
    usage: Callable[[], Usage | None],
    *,
    config: ProviderConfig,
    limit_s: float | None,
    foreign: tuple[type[BaseException], ...],
    translate: Callable[[BaseException, float], ModelError],
) -> int:
    """Feed every event of the stream to `add`; return the call's latency in ms.

    The whole call is bounded by the provider's timeout, or by `limit_s` (what the caller has left)
    when that is shorter; `open_stream` gets the SDK timeout with the same bound, so none of the
    SDK's own waits outlasts it. SDK and transport errors (`foreign`) are translated, given the
    stall timeout that applied.
    """
    bound, timeout_s = sdk_timeout(config, limit_s), call_timeout(config, limit_s)
    started = time.monotonic()
    try:
        with open_stream(bound) as stream:
            for event in stream:
                add(event)
                if time.monotonic() - started > timeout_s:
                    raise ModelUnavailable(f"model call exceeded its {timeout_s:.3g}s timeout")
    except ModelError as error:
        raise error.with_usage(usage()) from error.__cause__
    except foreign as error:
        stall_s = bound.read if bound.read is not None else config.stall_timeout_s
        raise translate(error, stall_s).with_usage(usage()) from None
    return int((time.monotonic() - started) * 1000)


def transport_error(
    error: BaseException,
    *,
    timeouts: tuple[type[BaseException], ...],
    unreachable: tuple[type[BaseException], ...],
    secret: str | None,
    stall_s: float,
    endpoint: str,
) -> ModelError | None:
    """The translation both SDKs share: a timeout or stall, or an endpoint that cannot be reached
    (both retryable, the key redacted); None for any other error."""
    if isinstance(error, (*timeouts, httpx2.TimeoutException)):
        return ModelUnavailable(f"model endpoint timed out or stalled (no data for {stall_s:.3g}s)")
    if isinstance(error, (*unreachable, httpx2.TransportError)):
        cause = error.__cause__ or error
        return ModelUnreachable(
            redact(f"cannot reach the model endpoint {endpoint}: {cause}".replace("  ", " "), secret)
        )
    return None
