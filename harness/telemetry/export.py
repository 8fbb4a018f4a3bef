"""The OpenTelemetry SDK's side: one tracer provider per process and config (OTLP/HTTP exporter
and/or an OTLP JSON file), the file exporter, and the W3C trace context a batch hands its workers.

The SDK is imported only here and only when telemetry is on: a run without it pays nothing."""

from __future__ import annotations

import base64
import json
import logging
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from harness.telemetry.config import TelemetryConfig
from harness.version import harness_version

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Tracer

SCOPE = "harness"
_IDS = ("traceId", "spanId", "parentSpanId")
_lock = threading.Lock()
_providers: dict[tuple[object, ...], TracerProvider] = {}


def tracer(config: TelemetryConfig) -> Tracer:
    """The tracer of this process for config (its provider made on first use, shut down at exit)."""
    return provider(config).get_tracer(SCOPE, harness_version())


def provider(config: TelemetryConfig) -> TracerProvider:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    with _lock:
        found = _providers.get(config.key())
        if found is not None:
            return found
        _one_line_logs()
        made = TracerProvider(
            resource=Resource.create({"service.name": "harness", "service.version": harness_version()})
        )
        if config.endpoint:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter(
                endpoint=config.endpoint, headers=dict(config.headers), timeout=config.timeout_s
            )
            made.add_span_processor(BatchSpanProcessor(exporter, export_timeout_millis=int(config.timeout_s * 1000)))
        if config.file:
            made.add_span_processor(BatchSpanProcessor(cast("SpanExporter", OtlpJsonFileExporter(config.file))))
        _providers[config.key()] = made
        return made


def flush(config: TelemetryConfig) -> None:
    """Send what the process has ended so far (a worker process may be gone before its exit hook)."""
    with _lock:
        found = _providers.get(config.key())
    if found is not None:
        found.force_flush(int(config.timeout_s * 1000) + 1000)


def carrier(context: Context | None = None) -> dict[str, str]:
    """The W3C `traceparent` (and `tracestate`) of context, or of the current span."""
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    found: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(found, context=context)
    return found


def parent(found: Mapping[str, str]) -> Context | None:
    """The context a carrier names (None for an empty carrier: a root span)."""
    if not found:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract(dict(found))


class OtlpJsonFileExporter:
    """A span exporter (the SDK's `SpanExporter` shape; the SDK is imported only when one is made) that appends each export as one line of OTLP JSON (the protobuf JSON mapping of an
    `ExportTraceServiceRequest`, with trace and span ids in hex as OTLP/JSON requires)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        try:
            line = json.dumps(otlp_json(spans), separators=(",", ":"))
            with self._lock, open(self.path, "a", encoding="utf-8") as handle:
                handle.write(line + "\n")
        except OSError:
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


def otlp_json(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    """The OTLP/JSON form of spans."""
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    data = MessageToDict(encode_spans(spans), use_integers_for_enums=True)
    for resource in data.get("resourceSpans", []):
        for scope in resource.get("scopeSpans", []):
            for span in scope.get("spans", []):
                _hex_ids(span)
                for link in span.get("links", []):
                    _hex_ids(link)
    return data


def _hex_ids(item: dict[str, Any]) -> None:
    for name in _IDS:
        if item.get(name):
            item[name] = base64.b64decode(item[name]).hex()


class _OneLine(logging.Formatter):
    """The SDK's complaints (a collector that does not answer) as one line, never a traceback."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage().strip().splitlines()
        return f"warning: telemetry: {message[0] if message else record.levelname}"


def _one_line_logs() -> None:
    logger = logging.getLogger("opentelemetry")
    if any(isinstance(handler.formatter, _OneLine) for handler in logger.handlers):
        return
    handler = logging.StreamHandler()
    handler.setFormatter(_OneLine())
    logger.addHandler(handler)
    logger.propagate = False
