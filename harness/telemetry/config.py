"""Where a run's spans go, and what they may carry: the CLI fills it from `--otel-*` flags and the
standard `OTEL_EXPORTER_OTLP_*` variables; a batch sends it to its workers with each task-run."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

TRACES_PATH = "/v1/traces"


class TelemetryConfig(BaseModel):
    """OpenTelemetry export of runs and batches. Off unless an endpoint or a file is named."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    endpoint: str | None = None
    """OTLP/HTTP traces URL (`…/v1/traces`); spans are posted there as protobuf."""
    headers: dict[str, str] = Field(default_factory=dict, repr=False)
    """Headers of every export request (a collector's auth): sent to the endpoint, never in a span."""
    file: Path | None = None
    """OTLP JSON lines file: one `ExportTraceServiceRequest` per line (offline use)."""
    content: bool = False
    """Put what the model and the repository wrote (prompts, replies, arguments, tool output, the
    task) into span attributes; off by default."""
    timeout_s: float = Field(5.0, gt=0, le=60)
    """How long one export may take (a dead collector costs a run at most this at its end)."""

    @property
    def enabled(self) -> bool:
        return bool(self.endpoint or self.file)

    def key(self) -> tuple[object, ...]:
        """What makes two configs share one exporter in a process."""
        return (self.endpoint, tuple(sorted(self.headers.items())), str(self.file or ""), self.timeout_s)


def traces_url(endpoint: str, *, signal_specific: bool = False) -> str:
    """The traces URL of an OTLP/HTTP endpoint: a base URL gets `/v1/traces` (as the SDK does with
    `OTEL_EXPORTER_OTLP_ENDPOINT`); a signal-specific one, or one already ending so, is used as is."""
    url = endpoint.strip()
    if signal_specific or url.rstrip("/").endswith(TRACES_PATH):
        return url
    return url.rstrip("/") + TRACES_PATH


def parse_headers(text: str) -> dict[str, str]:
    """`k=v,k2=v2` (values URL-encoded), the form of `OTEL_EXPORTER_OTLP_HEADERS`; a pair without `=`
    is a ValueError naming it (never its value)."""
    from urllib.parse import unquote

    headers: dict[str, str] = {}
    for pair in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"a header without `name=value` ({name.strip()[:40]!r}...)")
        headers[unquote(name.strip()).lower()] = unquote(value.strip())
    return headers
