"""A span over a block of work (a batch, one task-run on a worker), carried across processes by its
W3C trace context; nothing at all when telemetry is off."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from harness.telemetry import export
from harness.telemetry.config import TelemetryConfig


class Traced:
    """The open span of a `traced` block: its carrier for children in other processes, and
    attributes added as the work learns them."""

    def __init__(self, span: Any = None) -> None:
        self._span = span
        self.carrier: dict[str, str] = {}
        if span is not None:
            from opentelemetry import trace

            self.carrier = export.carrier(trace.set_span_in_context(span))

    def set(self, **attributes: Any) -> None:
        """Attributes named with `__` for dots (`harness__tasks=3` is `harness.tasks`); None is left out."""
        if self._span is not None:
            values = {name.replace("__", "."): value for name, value in attributes.items() if value is not None}
            with contextlib.suppress(Exception):
                self._span.set_attributes(values)

    def error(self, description: str) -> None:
        if self._span is not None:
            from opentelemetry.trace import Status, StatusCode

            self._span.set_status(Status(StatusCode.ERROR, description))


@contextmanager
def traced(
    config: TelemetryConfig, name: str, *, parent: Mapping[str, str] | None = None, **attributes: Any
) -> Iterator[Traced]:
    """A span named name (a child of the carrier parent) around the block, ended and sent after it."""
    if not config.enabled:
        yield Traced()
        return
    span = export.tracer(config).start_span(name, context=export.parent(parent or {}))
    handle = Traced(span)
    handle.set(**attributes)
    try:
        yield handle
    except BaseException as error:
        handle.error(f"{type(error).__name__}")
        raise
    finally:
        span.end()
        export.flush(config)
