"""What a run takes from outside its config (the run id, the engine, the key, the crash hook...): the
CLI, the API and the batch worker fill a `Runtime`; the composition root reads it and nothing else
outside the config."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from harness.telemetry.config import TelemetryConfig


def _no_phase(phase: str) -> None:
    return None


@dataclass(frozen=True)
class Runtime:
    """What a run takes from outside its config; the CLI fills it from flags and the environment."""

    run_id: str
    """Label of every container and image the run makes (`harness sandbox prune --run` finds them)."""
    docker_host: str | None = None
    """Engine address; None is the default socket."""
    api_key: str | None = field(default=None, repr=False)
    """The model endpoint's key; never logged, never passed into a container."""
    base_url_fallback: str | None = None
    """Endpoint used when neither the flag nor the config file names one (`$OPENAI_BASE_URL`...)."""
    cloud_fallback: dict[str, str] = field(default_factory=dict)
    """A `bedrock:`/`vertex:` model's region and project when neither flag nor config file names them
    (`$AWS_REGION`, `$CLOUD_ML_REGION`, `$ANTHROPIC_VERTEX_PROJECT_ID`)."""
    key_variable: str | None = None
    """Where the key was looked for (named in the error when a vendor endpoint gets none)."""
    on_phase: Callable[[str], None] = _no_phase
    """Told each loop phase (tests kill the process at one to prove crash safety)."""
    interactive: bool = False
    """A person at the terminal answers `ask` rules; otherwise approvals wait in the session folder."""
    warm_dir: Path | None = None
    """The warm service's folder: a new session of `pace="latency"` borrows its first containers
    there when a run slot is ready (see sandbox.warm.loans)."""
    pace: Literal["latency", "throughput"] = "latency"
    """latency: a session starts POOL_SIZE warm containers (a person or a script waits on every
    call); on an engine elsewhere its first beside the network-namespace holder. throughput, for
    batches: one warm container, more only when a call finds none, and there the first joins the
    holder: the models think between calls, and every start is CPU the other sessions of a small
    host need."""
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)
    """Where the run's OpenTelemetry spans go (nowhere by default)."""
    trace_parent: dict[str, str] = field(default_factory=dict)
    """The W3C trace context the run span is a child of (a batch's task-run), empty for a root."""
    spend_ledger: Path | None = None
    """The ledger of spend across runs when the config names none ($HARNESS_SPEND_LEDGER; else the
    per-user one)."""
    secret_values: dict[str, str] = field(default_factory=dict, repr=False)
    """The values of the session settings' `--secret` bindings, by NAME (read from their variables by
    the CLI): only the session's egress proxy gets them; every record and report redacts them."""

    @property
    def secrets(self) -> list[str]:
        """Strings the trajectory redacts."""
        return [value for value in (self.api_key, *self.secret_values.values()) if value]
