"""What a session is made with, as a user says it: one sub-model every config that makes sessions
embeds (the run config, the integrations' box config, the tasks file's defaults and tasks).

The setup commands and what they alone may have (network, a CA bundle, a proxy, read-only mounts),
and the workspace quota. A session's full config (`sandbox.session.records.SessionConfig`) is these
settings and what harness decides with them. Files and flags spell the keys flat (`setup`,
`setup_network`, ...): `lift_flat` moves them into the sub-model, so a config reads as it always did.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator, model_validator

from sandbox.spec import parse_size


class SessionSettings(BaseModel):
    """How a new session prepares its environment and how much its workspace may hold."""

    model_config = ConfigDict(extra="forbid")

    setup: list[str] = Field(default_factory=list)
    """Commands run once, before step 0, in a container with a writable root (`--setup`); the result
    is the session's base image, cached by content."""
    setup_network: bool = False
    """Allow network during setup only (`--setup-network`); tool calls never get it from here."""
    setup_ca: Path | None = None
    """A PEM CA bundle the setup container (and only it) trusts, for HTTPS through a proxy with its own
    certificate authority (`--setup-ca`); added to the image's own bundle for the setup commands."""
    setup_proxy: str | None = None
    """HTTP(S)_PROXY for the setup commands only (`--setup-proxy`); recorded without its password."""
    setup_mounts: list[str] = Field(default_factory=list)
    """`HOST_DIR:CONTAINER_DIR` bound read-only into the setup container only (`--setup-mount`): a
    wheelhouse or a package cache for an offline install."""
    setup_timeout: float = Field(900.0, gt=0, le=24 * 3600)
    """Seconds all the setup commands together may take (`--setup-timeout`); past it the command
    running is stopped and setup fails saying so. Its full output is kept either way (setup.log)."""
    allow_net: list[str] = Field(default_factory=list)
    """Hosts the session may reach through its egress proxy (`--allow-net`: `HOST[:PORT]`, `*.SUFFIX`,
    an address or range, or a preset such as `pypi`, `npm`, `crates`, `go`, `github`): the setup
    commands always, tool calls only with `allow_net_tools`. The containers still have no route out
    and no resolver; every request is recorded (see sandbox.network)."""
    allow_net_tools: bool = False
    """Tool calls (not only setup) reach the `allow_net` hosts (`--allow-net-tools`)."""
    secrets: list[str] = Field(default_factory=list)
    """`NAME=ENV_VAR@HOST` (`--secret`): the containers see NAME as a random placeholder; the egress
    proxy puts the real value (read from ENV_VAR on the host when the session starts) in place of the
    placeholder in the headers of requests to HOST only, over TLS it terminates with a session CA the
    containers trust. HOST is allowed by it. The value is never in a container, a record or a report."""
    allow_net_ca: Path | None = None
    """A PEM bundle the egress proxy trusts beside the system's when it connects to a secret's host
    (`--allow-net-ca`: a company's internal CA)."""
    ca_bundle: Path | None = None
    """A PEM bundle the whole session trusts (`--ca-bundle`): the setup container and every call that
    reaches the allowed hosts, and the egress proxy when it connects to a secret's host. What an
    intercepting TLS proxy (a corporate network) needs: one flag for `--setup-ca` and `--allow-net-ca`."""
    workspace_quota: int | None = None
    """Bytes the whole workspace may hold (`--workspace-quota 2g`): it becomes a filesystem of that
    size (sandbox.session.quota; root only), so a call writing past it gets "No space left on device"
    and the host's disk never fills. None: no limit beyond the host's disk."""

    @model_validator(mode="after")
    def _setup_options(self) -> SessionSettings:
        problem = (
            setup_option_problem(
                self.setup,
                self.setup_network,
                self.setup_ca is not None,
                bool(self.setup_proxy),
                bool(self.setup_mounts),
                bool(self.allow_net or self.secrets),
            )
            or ca_bundle_problem(self.ca_bundle is not None, self.setup_network, bool(self.allow_net or self.secrets))
            or network_option_problem(
                [*self.allow_net, *self.secrets], self.allow_net_tools, self.setup_network, bool(self.setup_proxy)
            )
        )
        if problem:
            raise ValueError(problem)
        return self

    @property
    def setup_trust(self) -> Path | None:
        """The bundle the setup container trusts: `--setup-ca`, else `--ca-bundle`."""
        return self.setup_ca or self.ca_bundle

    def named_bundles(self) -> list[tuple[Path, str]]:
        """Each CA bundle the settings name, with the flag that names it."""
        named = [(self.setup_ca, "--setup-ca"), (self.allow_net_ca, "--allow-net-ca"), (self.ca_bundle, "--ca-bundle")]
        return [(Path(path).expanduser().absolute(), flag) for path, flag in named if path is not None]

    @property
    def proxy_trust(self) -> Path | None:
        """The bundle the egress proxy trusts upstream of a secret's host: `--allow-net-ca`, else `--ca-bundle`."""
        return self.allow_net_ca or self.ca_bundle

    @field_validator("secrets")
    @classmethod
    def _secrets(cls, value: list[str]) -> list[str]:
        for item in value:
            parse_secret(item)
        if len({parse_secret(item)[0] for item in value}) != len(value):
            raise ValueError("--secret: a NAME is bound twice")
        return value

    @property
    def network_hosts(self) -> list[str]:
        """What the egress proxy allows: the `allow_net` entries and each secret's host."""
        return [
            *self.allow_net,
            *(parse_secret(item)[2] for item in self.secrets if parse_secret(item)[2] not in self.allow_net),
        ]

    @field_validator("allow_net")
    @classmethod
    def _allowed(cls, value: list[str]) -> list[str]:
        from sandbox.network.allow import parse

        parse(value)  # AllowError is a ValueError: the entry and the forms are named
        return value

    @field_validator("workspace_quota", mode="before")
    @classmethod
    def _quota(cls, value: int | str | None) -> int | None:
        return None if value is None else parse_size(value)

    @field_validator("setup_mounts")
    @classmethod
    def _mounts(cls, value: list[str]) -> list[str]:
        for item in value:
            parse_setup_mount(item)
        return value

    @field_serializer("setup_proxy")
    def _redacted(self, value: str | None) -> str | None:
        return redact_url(value) if value else value


class StartedFrom(BaseModel):
    """A start state made from a commit of a git repository other than the folder it was copied from
    (a mined task's start state is a plain folder): what `harness apply` lands a change on."""

    repository: str | None = None
    """The git repository the start state came from (absolute, as it was mined; None: not known, and
    `harness apply --repo` names it)."""
    commit: str | None = None
    """The commit the start state is built on (a mined task: its commit's first parent); None: the
    first parent of `applied`, asked of the repository."""
    applied: str | None = None
    """A commit whose changes the start state already holds on some paths (a mined task: its commit,
    whose test changes are there): a landed change carries those too, so the branch holds the tree
    that was verified."""


FLAT_KEYS = tuple(SessionSettings.model_fields)
"""The settings' keys as files and flags spell them, at the top level of their config."""


def lift_flat(data: Any, into: str = "session") -> Any:
    """data (a config's raw mapping) with the settings' flat keys moved into its `into` table; a
    config that names both a flat key and the same key inside the table is refused."""
    if not isinstance(data, dict) or not any(key in data for key in FLAT_KEYS):
        return data
    table = data.get(into, {})
    if not isinstance(table, dict):
        return data  # the table's own validation says what is wrong with it
    both = sorted(key for key in FLAT_KEYS if key in data and key in table)
    if both:
        raise ValueError(f"{', '.join(both)} given both at the top level and in [{into}]: keep one")
    lifted = {key: value for key, value in data.items() if key not in FLAT_KEYS}
    lifted[into] = {**table, **{key: data[key] for key in FLAT_KEYS if key in data}}
    return lifted


def ca_bundle_problem(given: bool, setup_network: bool, allow_net: bool) -> str | None:
    """What is wrong with --ca-bundle here, or None: it is for a session that reaches a network."""
    if given and not (setup_network or allow_net):
        return "--ca-bundle is for a session with network: add --allow-net HOST (or --setup-network for setup)"
    return None


def setup_option_problem(
    setup: list[str], network: bool, ca: bool, proxy: bool, mounts: bool, allow_net: bool = False
) -> str | None:
    """What is wrong with a combination of setup options (flags and config keys alike), or None."""
    if (network or ca or proxy or mounts) and not setup:
        return "--setup-network, --setup-ca, --setup-proxy and --setup-mount need at least one --setup command"
    if ca and not (network or allow_net):
        return "--setup-ca is for a setup with network: add --setup-network or --allow-net"
    if proxy and not network:
        return "--setup-proxy is for a setup with network: add --setup-network"
    return None


def network_option_problem(allow_net: list[str], tools: bool, setup_network: bool, setup_proxy: bool) -> str | None:
    """What is wrong with the network options together, or None."""
    if tools and not allow_net:
        return (
            "--allow-net-tools gives tool calls the --allow-net hosts: name at least one with --allow-net or --secret"
        )
    if allow_net and setup_network:
        return "--allow-net and --setup-network contradict each other: the allowlist or the whole network, not both"
    if allow_net and setup_proxy:
        return "--setup-proxy is for --setup-network; with --allow-net the session's own proxy carries setup"
    return None


def parse_setup_mount(item: str) -> tuple[Path, str]:
    """(host path, container path) of `HOST_DIR:CONTAINER_DIR`; ValueError says what is wrong."""
    host, sep, target = item.rpartition(":")
    if not sep or not host or not target:
        raise ValueError(f"a setup mount is HOST_DIR:CONTAINER_DIR, not {item!r}")
    if not target.startswith("/") or target.rstrip("/") in ("", "/workspace") or target.startswith("/workspace/"):
        raise ValueError(f"setup mount target {target!r} must be an absolute path outside /workspace")
    return Path(host).expanduser(), target.rstrip("/") or "/"


_SECRET = re.compile(
    r"^([A-Za-z_][A-Za-z0-9_]*)=([A-Za-z_][A-Za-z0-9_]*)@([A-Za-z0-9.-]+(:[0-9]{1,5})?)(/[A-Za-z0-9._~!$&'()*+,;=:@%/-]*)?$"
)


def parse_secret(item: str) -> tuple[str, str, str]:
    """(NAME, ENV_VAR, HOST[:PORT]) of `NAME=ENV_VAR@HOST[:PORT][/PATH]`; ValueError says the form."""
    found = _SECRET.match(item.strip())
    if found is None:
        raise ValueError(
            f"--secret {item!r}: write NAME=ENV_VAR@HOST[/PATH] (the container's variable, the host variable "
            "holding the value, the one host it is sent to, and the paths there it is sent with)"
        )
    return found[1], found[2], found[3].lower()


def secret_path(item: str) -> str:
    """The path prefix `NAME=ENV_VAR@HOST/PATH` binds the value to ("": every request to the host)."""
    found = _SECRET.match(item.strip())
    return found[5] or "" if found is not None else ""


def redact_url(url: str) -> str:
    """The URL with any password replaced by ***."""
    return re.sub(r"^([a-zA-Z][a-zA-Z0-9+.-]*://[^:/@]+):[^@/]*@", r"\1:***@", url)
