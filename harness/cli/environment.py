"""Everything harness reads from the environment, read here and nowhere else.

`$HARNESS_RUN_ID` (the label tests use to find and clean what they made), `$HARNESS_STATE_DIR`,
`$DOCKER_HOST`, the API key (by the variable the config names, else the vendor's usual one), the
endpoint fallback `$OPENAI_BASE_URL` / `$ANTHROPIC_BASE_URL`, and the test-only crash point
`$HARNESS_CRASH_AT`, `$HARNESS_TRACEBACK` (show an internal error's traceback), where the warm
service lives (`$HARNESS_WARM_DIR`), and the OpenTelemetry exporter's standard variables
(`$OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT`, `..._HEADERS`, `..._PROTOCOL`, `$OTEL_SDK_DISABLED`). The
values reach the rest of harness inside an `assembly.Runtime`.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing's, without importing it: the quick path of `harness exec` reads this module
if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from harness.assembly import Runtime
    from harness.config import RunConfig
    from harness.telemetry.config import TelemetryConfig

LOOP_PHASES = ("model_answered", "turn_recorded", "calls_returned", "mid_tool", "mid_snapshot", "after_snapshot")
CRASH_PHASES = ("session_ready", *LOOP_PHASES, *(f"child_{phase}" for phase in LOOP_PHASES))
"""Where `HARNESS_CRASH_AT` may kill: a new session's (its workspace and warm calls made, its record
not yet), the loop's phases, and a sub-agent's (`child_...`)."""


def run_id(prefix: str = "run") -> str:
    """$HARNESS_RUN_ID or a fresh `<prefix>-<12 hex>` id."""
    import uuid  # here: the quick path of `harness exec` imports this module and never needs one

    return os.environ.get("HARNESS_RUN_ID") or f"{prefix}-{uuid.uuid4().hex[:12]}"


def docker_host() -> str | None:
    """The engine address the user chose ($DOCKER_HOST), or None for the default socket."""
    return os.environ.get("DOCKER_HOST") or None


def session_at(option: Path | None, target: str) -> tuple[Path, str]:
    """(where the session lives, its id) for a session named by its id, or by its folder's path (a
    batch's `night/sessions/<id>`, the folder `harness view` takes): the folder's parent is where it
    lives, whatever --state-dir says (the folder names its session whole)."""
    from pathlib import Path

    if "/" in target or target.startswith((".", "~")):
        folder = Path(target).expanduser().resolve()
        if (folder / "session.json").is_file():
            return folder.parent, folder.name
        from harness.errors import NotFoundError

        raise NotFoundError(f"{target} is not a session's folder (it holds no session.json)")
    return state_dir(option), target


def state_dir(option: Path | None) -> Path:
    """Where sessions live: --state-dir, else $HARNESS_STATE_DIR, else the per-user data dir."""
    from pathlib import Path

    if option is not None:
        return option.expanduser().resolve()
    env = os.environ.get("HARNESS_STATE_DIR")
    if env:
        return Path(env).expanduser().resolve()
    from harness.api import default_state_dir

    return default_state_dir()


def key_variable(config: RunConfig) -> str | None:
    """The environment variable the run's key is read from: its provider entry's `api_key_env`,
    else the vendor's usual one (`harness.providers.vendor`)."""
    from harness.providers.vendor import ModelSpec  # here: the quick path imports this module

    return config.provider_config().api_key_env or ModelSpec.of(config.model).vendor.key_env


def api_key(config: RunConfig) -> str | None:
    """The key for the run's provider, from the environment variable the config names."""
    variable = key_variable(config)
    return os.environ.get(variable) or None if variable else None


def model_key(model: str, config: RunConfig) -> tuple[str | None, str | None]:
    """(variable, key) of `model` under config's provider entries: what a command that runs a model
    other than config's own (a batch's, `models check`) reads, by the same rule as a run."""
    of_model = config.model_copy(update={"model": model})
    return key_variable(of_model), api_key(of_model)


def base_url_fallback(model: str | None) -> str | None:
    """$OPENAI_BASE_URL / $ANTHROPIC_BASE_URL for that vendor, when set."""
    from harness.providers.vendor import ModelSpec

    variable = ModelSpec.of(model).vendor.base_url_env
    return os.environ.get(variable) or None if variable else None


def cloud_fallback(model: str | None) -> dict[str, str]:
    """The region / project of a `bedrock:` or `vertex:` model from the cloud's usual variables."""
    from harness.providers.vendor import ModelSpec

    found: dict[str, str] = {}
    for setting, variables in ModelSpec.of(model).vendor.cloud_env.items():
        value = next((os.environ[v] for v in variables if os.environ.get(v)), None)
        if value:
            found[setting] = value
    return found


def show_tracebacks() -> bool:
    """$HARNESS_TRACEBACK=1: let an unexpected error's traceback through (for bug reports)."""
    return os.environ.get("HARNESS_TRACEBACK") == "1"


def crash_hook() -> Callable[[str], None]:
    """`HARNESS_CRASH_AT=phase[:n]`: SIGKILL this process the n-th time the loop reaches phase (tests)."""
    value = os.environ.get("HARNESS_CRASH_AT")
    if not value:
        return lambda phase: None
    phase, _, nth = value.partition(":")
    if phase not in CRASH_PHASES:
        from harness.errors import ConfigError

        raise ConfigError(f"HARNESS_CRASH_AT: unknown phase {phase!r} (one of {', '.join(CRASH_PHASES)})")
    target, seen = int(nth or 1), [0]

    def hook(reached: str) -> None:
        if reached == phase:
            seen[0] += 1
            if seen[0] >= target:
                import signal

                os.kill(os.getpid(), signal.SIGKILL)

    return hook


def telemetry(endpoint: str | None = None, file: Path | None = None, content: bool = False) -> TelemetryConfig:
    """Where spans go: --otel-endpoint, else the standard OTLP variables (a traces endpoint as is, a base
    endpoint with /v1/traces); --otel-file beside or instead. `OTEL_SDK_DISABLED=true` turns the
    variables off (never the flags). Only OTLP over HTTP (protobuf) is spoken."""
    from harness.errors import ConfigError
    from harness.telemetry.config import TelemetryConfig, parse_headers, traces_url

    signal_specific = False
    if endpoint is None and os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() != "true":
        endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or None
        signal_specific = endpoint is not None
        endpoint = endpoint or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or None
    headers: dict[str, str] = {}
    if endpoint is not None:
        if not endpoint.strip().lower().startswith(("http://", "https://")):
            raise ConfigError(
                f"OTLP endpoint {endpoint!r} is not an http:// or https:// URL (OTLP/HTTP, e.g. port 4318)"
            )
        protocol = (
            os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or ""
        )
        if protocol and protocol.strip() != "http/protobuf":
            raise ConfigError(
                f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol.strip()}: harness exports OTLP over HTTP only "
                "(http/protobuf); point the endpoint at the collector's HTTP port (4318) and unset the protocol"
            )
        variable = (
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS"
            if os.environ.get("OTEL_EXPORTER_OTLP_TRACES_HEADERS")
            else "OTEL_EXPORTER_OTLP_HEADERS"
        )
        try:
            headers = parse_headers(os.environ.get(variable, ""))
        except ValueError as error:
            raise ConfigError(f"{variable}: {error}") from None
        endpoint = traces_url(endpoint, signal_specific=signal_specific)
    if file is not None:
        file = file.expanduser().resolve()
        if not file.parent.is_dir():
            raise ConfigError(f"--otel-file {file}: its folder does not exist")
    return TelemetryConfig(endpoint=endpoint, headers=headers, file=file, content=content)


def secret_values(bindings: list[str]) -> dict[str, str]:
    """The values of `--secret NAME=ENV_VAR@HOST` bindings, by NAME, from their variables (those set)."""
    from sandbox.settings import parse_secret

    found = {}
    for item in bindings:
        name, variable, _ = parse_secret(item)
        if os.environ.get(variable):
            found[name] = os.environ[variable]
    return found


def runtime(
    config: RunConfig, *, interactive: bool = False, prefix: str = "run", spans: TelemetryConfig | None = None
) -> Runtime:
    """The Runtime of a run of config, filled from the environment (spans: `telemetry()`'s answer,
    for the commands that export them)."""
    from harness.assembly import Runtime
    from harness.telemetry.config import TelemetryConfig

    return Runtime(
        telemetry=spans or TelemetryConfig(),
        secret_values=secret_values(config.session.secrets),
        run_id=run_id(prefix),
        docker_host=docker_host(),
        api_key=api_key(config),
        base_url_fallback=base_url_fallback(config.model),
        cloud_fallback=cloud_fallback(config.model),
        key_variable=key_variable(config),
        on_phase=crash_hook(),
        interactive=interactive,
        warm_dir=warm_dir(),
        spend_ledger=spend_ledger(),
    )


def spend_ledger() -> Path | None:
    """$HARNESS_SPEND_LEDGER: the ledger of spend across runs (harness.spend), else None (the config's,
    else the per-user one)."""
    from pathlib import Path

    value = os.environ.get("HARNESS_SPEND_LEDGER")
    return Path(value).expanduser().absolute() if value else None


def warm_folder() -> str:
    """The warm service's folder for the engine in use: under $HARNESS_WARM_DIR, else the user cache
    folder (beside the sessions' filesystem, where its slots are made); one subfolder per engine."""
    from sandbox.warm.wire import engine_subfolder

    base = os.environ.get("HARNESS_WARM_DIR") or os.path.join("~", ".cache", "harness", "warm")
    return os.path.join(os.path.expanduser(base), engine_subfolder(docker_host()))


def warm_dir() -> Path:
    """`warm_folder`, as a path."""
    from pathlib import Path

    return Path(warm_folder())


WARM_SERVICE_ENV = frozenset(
    {
        "PATH", "HOME", "USER", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV",
        "DOCKER_HOST", "DOCKER_CERT_PATH", "DOCKER_TLS_VERIFY", "DOCKER_API_VERSION", "DOCKER_CONFIG",
        "HARNESS_RUN_ID", "HARNESS_WARM_DIR", "HARNESS_TRACEBACK",
    }
)  # fmt: skip
"""What a detached warm service inherits from the shell that starts it: enough to find its
interpreter, its engine and its folders, and nothing else (no API key, whatever its name)."""


def warm_service_env() -> dict[str, str]:
    """The environment `harness warm start` gives the service it detaches."""
    return {key: value for key, value in os.environ.items() if key in WARM_SERVICE_ENV}


def model_flag(model: str | None, flag: str = "--model", *, batch: bool = False) -> str | None:
    """A --model flag's value, refused as a bad argument (64) unless it is PROVIDER:MODEL of a provider
    harness knows (AGENT@PROVIDER:MODEL where a batch takes it); a model a config file names is the
    config's error (78), said where the file is read."""
    if model is None:
        return None
    from harness.errors import ConfigError, UsageError
    from harness.providers.vendor import VENDORS, ModelSpec

    bare = ModelSpec.of(model)
    if batch and bare.prefix in ("reference", "reference-change") and model.endswith(":") and not bare.target:
        return model  # a mined task's own reference change (each task names its file)
    try:
        spec = ModelSpec.parse(model)
    except ConfigError as error:
        raise UsageError(f"{flag}: {error}") from None
    if spec.prefix not in VENDORS:
        raise UsageError(f"{flag}: unknown model provider {spec.prefix!r} (known: {', '.join(sorted(VENDORS))})")
    return model


def bundle_flags(**given: Path | None) -> None:
    """Each CA bundle a flag names is a regular file of at most 16 MiB, checked before anything of
    the command prints or starts (flag name: its keyword, `ca_bundle` for --ca-bundle); a usage error
    naming the flag otherwise."""
    from sandbox.named import check_named

    for name, path in given.items():
        if path is not None:
            check_named(path, what="--" + name.replace("_", "-"), limit=16 * 1024**2)
