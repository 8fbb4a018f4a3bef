"""An OTLP/HTTP traces receiver on 127.0.0.1: what a collector does with the posts, decoded with the
official protobuf types, so the tests read back exactly what the SDK's exporter sent."""

from __future__ import annotations

import gzip
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


def attributes(items: Any) -> dict[str, Any]:
    """OTLP key-values as a plain dict (arrays as lists)."""
    found: dict[str, Any] = {}
    for item in items:
        value = MessageToDict(item.value)
        kind, raw = next(iter(value.items())) if value else ("", None)
        if kind == "arrayValue":
            raw = [next(iter(v.values())) for v in raw.get("values", [])]
        elif kind == "intValue":
            raw = int(raw)
        found[item.key] = raw
    return found


class Span(dict):
    """One received span: name, ids in hex, times, status, attributes, and the resource's."""


class Receiver:
    """`with Receiver() as r:` serves POST /v1/traces; `r.spans()` is everything received so far."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                with receiver._lock:
                    receiver.requests.append(request)
                    receiver.headers.append({k.lower(): v for k, v in self.headers.items()})
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200 if self.path == "/v1/traces" else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def spans(self) -> list[Span]:
        with self._lock:
            requests = list(self.requests)
        return [span for request in requests for span in spans_of(request)]


def spans_of(request: ExportTraceServiceRequest) -> list[Span]:
    found = []
    for resource in request.resource_spans:
        shared = attributes(resource.resource.attributes)
        for scope in resource.scope_spans:
            for span in scope.spans:
                found.append(
                    Span(
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_id=span.parent_span_id.hex(),
                        start=span.start_time_unix_nano,
                        end=span.end_time_unix_nano,
                        status=span.status.code,
                        attributes=attributes(span.attributes),
                        resource=shared,
                    )
                )
    return found
