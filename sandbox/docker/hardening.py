"""The hardened container configuration every sandbox container gets (pure: spec → engine config).

Kept apart from the engine calls so the posture reads in one place and so a warm-pool key can be
computed from exactly what the engine would be asked to create.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sandbox.docker.stubcall import NODEV_TARGET, STUB_ARGV, STUB_TARGET, nodev_source, stub_source
from sandbox.network import egress
from sandbox.spec import Mount, SandboxSpec

ENVIRONMENT = {
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
}
"""The whole environment of a sandboxed command: fixed, never copied from the host."""

KEEPALIVE = ["sleep", "infinity"]
"""What a pre-started container runs (under docker-init) until the call is exec'd into it."""


def container_config(
    image_id: str,
    spec: SandboxSpec,
    workspace: Path,
    mounts: Sequence[Mount],
    user: str,
    labels: dict[str, str],
    *,
    stub: bool = False,
    path: str | None = None,
    tunnel: bool = False,
) -> dict[str, Any]:
    """Keyword arguments for `APIClient.create_container` (host_config as create_host_config kwargs).

    stub: the first process is the call stub (bound read-only, stdin kept open for the one request),
    else KEEPALIVE for calls by `docker exec`. path: the PATH the image declares, kept instead of the
    default (an image's own, never the host's). tunnel: egress goes through the engine's API
    (`sandbox.docker.tunnel`, an engine elsewhere): neither the egress folder nor the relay is bound,
    and the first process does not start the relay (the tunnel listens at the call)."""
    binds = {str(Path(workspace).resolve()): {"bind": spec.workdir, "mode": "rw"}}
    for mount in mounts:
        binds[str(Path(mount.source).resolve())] = {"bind": mount.target, "mode": "ro" if mount.read_only else "rw"}
    if stub:
        binds[str(stub_source())] = {"bind": STUB_TARGET, "mode": "ro"}
    if spec.egress and not tunnel:
        binds[str(Path(spec.egress).resolve())] = {"bind": egress.CONTAINER_DIR, "mode": "ro"}
        binds[str(relay_source())] = {"bind": RELAY_TARGET, "mode": "ro"}
    host = {
        "binds": binds,
        # with egress, the relay is the way out: no network, or the session's services network (no route out)
        "network_mode": ("none" if spec.network in ("none", "bridge", "host") else spec.network)
        if spec.egress
        else spec.network,
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "read_only": spec.read_only_root,
        # exec: the engine's tmpfs default is noexec, which breaks test suites that build and run a
        # binary or a script in /tmp (go test, pytest's tmp_path) and stops nothing a shell cannot do.
        "tmpfs": {"/tmp": f"rw,exec,nosuid,nodev,size={spec.tmpfs},mode=1777"} if tmp_is_tmpfs(spec) else {},
        "mem_limit": spec.memory,
        "memswap_limit": spec.memory,
        "nano_cpus": int(spec.cpus * 1e9),
        "pids_limit": spec.pids,
        "log_config": {"type": "none", "config": {}},
        "init": True,
        "runtime": spec.runtime,
    }
    if spec.runtime == "runsc":
        _hide_gvisor_devices(host)
        host["security_opt"] = ["no-new-privileges", f"seccomp={GVISOR_SECCOMP}"]
    environment = {**ENVIRONMENT, "PATH": path} if path else dict(ENVIRONMENT)
    command = list(STUB_ARGV if stub else KEEPALIVE)
    if spec.egress:
        environment.update(egress_environment(Path(spec.egress)))
        if not tunnel:
            command = with_relay(command, trust=has_ca(spec.egress))
    config: dict[str, Any] = {
        "image": image_id,
        "command": command,
        "user": user,
        "environment": environment,
        "working_dir": spec.workdir,
        "labels": dict(labels),
        "host_config": host,
    }
    if stub:
        config["stdin_open"] = True
    return config


HOSTS_TARGET = "/etc/hosts"


def hosts_source() -> Path:
    """The names a container in a namespace of its own resolves (`own_namespace`): loopback's,
    as the engine writes them for `network_mode=none`."""
    return Path(__file__).with_name("hosts.txt")


def own_namespace(config: dict[str, Any]) -> dict[str, Any]:
    """config without network (`network_mode=none`) in a network namespace the engine does not
    make: with networking disabled, the runtime gives the container a new, empty namespace of its
    own (loopback only), and the engine sets up no network for it: none of its two helpers per
    container (a prestart hook and the switch that turns IPv6 off, each a run of the engine's own
    program). Measured here: the
    engine's CPU per start and removal 0.40 → 0.22 s, the start 0.21 → 0.12 s, the same as joining
    another container's namespace. The engine then writes no /etc/hosts: harness's is bound read-only
    (`hosts_source`). IPv6 stays on in it (loopback's ::1 answers, as on a developer's machine).
    Any other network mode is left as it is, and so is config without that file (an installation
    that lost it): the engine would bind a folder it made in its place."""
    if config["host_config"].get("network_mode") != "none" or not hosts_source().is_file():
        return config
    host = dict(config["host_config"])
    host["binds"] = {**host["binds"], str(hosts_source()): {"bind": HOSTS_TARGET, "mode": "ro"}}
    return {**config, "network_disabled": True, "host_config": host}


def tmp_is_tmpfs(spec: SandboxSpec) -> bool:
    """/tmp is a fresh tmpfs per container unless a writable-root spec keeps it in the root."""
    return spec.read_only_root or not spec.tmp_in_root


def is_stub(config: dict[str, Any]) -> bool:
    return bool(config.get("stdin_open"))


def without_stub(config: dict[str, Any]) -> dict[str, Any]:
    """The same container with KEEPALIVE as its first process (calls by `docker exec`)."""
    host = dict(config["host_config"])
    host["binds"] = {source: bind for source, bind in host["binds"].items() if bind["bind"] != STUB_TARGET}
    plain = {key: value for key, value in config.items() if key != "stdin_open"}
    egress_folder = next(
        (src for src, b in config["host_config"]["binds"].items() if b["bind"] == egress.CONTAINER_DIR), None
    )
    command = with_relay(list(KEEPALIVE), trust=has_ca(egress_folder)) if egress_folder else list(KEEPALIVE)
    return {**plain, "command": command, "host_config": host}


TUNNEL_TARGET = "/opt/harness/egress-tunnel.py"
"""Where a call's container on an engine elsewhere gets the tunnel's container end (read-only)."""


def tunnel_source() -> Path:
    from sandbox.network import tunnel

    return Path(tunnel.__file__).resolve()


RELAY_TARGET = "/opt/harness/egress-relay.py"
"""Where a container with egress sees the relay (read-only)."""
_PROXY_URL = f"http://127.0.0.1:{egress.RELAY_PORT}"
EGRESS_ENVIRONMENT = {
    **dict.fromkeys(("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"), _PROXY_URL),
    "NO_PROXY": "localhost,127.0.0.1,::1",
    "no_proxy": "localhost,127.0.0.1,::1",
    "npm_config_proxy": _PROXY_URL,
    "npm_config_https_proxy": _PROXY_URL,
    "CARGO_HTTP_PROXY": _PROXY_URL,
}
"""What tells the usual clients (pip, npm, cargo, go, curl, git, requests) to use the relay."""


def relay_source() -> Path:
    from sandbox.network import relay

    return Path(relay.__file__).resolve()


EGRESS_BUNDLE = "/tmp/harness-egress-ca.pem"
"""The image's own CA bundle plus the session CA (a session with secrets), made as the container starts."""
EGRESS_CA_VARIABLES = (
    "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "CARGO_HTTP_CAINFO",
)  # fmt: skip


def egress_environment(folder: Path) -> dict[str, str]:
    """The proxy variables, and with secrets their placeholders and the trust of the session CA."""
    found = dict(EGRESS_ENVIRONMENT)
    placeholders = folder / egress.ENVIRONMENT_NAME
    if placeholders.is_file():
        found.update(json.loads(placeholders.read_text()))
    if has_ca(str(folder)):
        found.update(dict.fromkeys(EGRESS_CA_VARIABLES, EGRESS_BUNDLE))
        found["NODE_EXTRA_CA_CERTS"] = EGRESS_EXTRA
    return found


EGRESS_EXTRA = "/tmp/harness-egress-extra-ca.pem"
"""The CAs the session adds to the image's (the session CA, the user's --ca-bundle): Node takes only these."""


def has_ca(folder: str | Path | None) -> bool:
    """Whether the egress folder holds a CA the calls must trust (the session CA, the user's --ca-bundle)."""
    return folder is not None and any((Path(folder) / name).is_file() for name in (egress.CA_NAME, egress.TRUST_NAME))


def with_relay(command: list[str], trust: bool = False) -> list[str]:
    """command, started once the relay serves 127.0.0.1 inside the container (it returns then);
    with trust, once the session's CAs (the session CA with secrets, the user's --ca-bundle) have
    joined the image's bundle."""
    start = f"python3 {RELAY_TARGET} {egress.RELAY_PORT} {egress.CONTAINER_DIR}/{egress.SOCKET_NAME}"
    if trust:
        start = f"{trust_prelude(egress.CONTAINER_DIR)} && {start}"
    return ["/bin/sh", "-c", f'{start} && exec "$@"', "sh", *command]


def trust_prelude(folder: str) -> str:
    """Shell that joins the session's CAs in folder (the session CA with secrets, the user's
    --ca-bundle) to the image's bundle, for the variables `egress_environment` sets."""
    added = " ".join(f"{folder}/{name}" for name in (egress.CA_NAME, egress.TRUST_NAME))
    extra = f"cat {added} > {EGRESS_EXTRA} 2>/dev/null; [ -s {EGRESS_EXTRA} ]"
    bundle = f"cat /etc/ssl/certs/ca-certificates.crt {EGRESS_EXTRA} > {EGRESS_BUNDLE} 2>/dev/null"
    return f"{{ {extra}; }} && {{ {bundle} || cp {EGRESS_EXTRA} {EGRESS_BUNDLE}; }}"


TUNNEL_CA_DIR = "/opt/harness/egress"
"""Where a call's container on an engine elsewhere gets the session's CAs (there is no egress folder bound)."""


def tunnel_mounts(egress_folder: str | Path) -> list[Mount]:
    """What a call's container on an engine elsewhere gets instead of the egress folder and the
    relay: the tunnel's container end and the session's CAs (files only: never the proxy's socket,
    nor anything else the folder may hold)."""
    found = [Mount(source=tunnel_source(), target=TUNNEL_TARGET)]
    for name in (egress.CA_NAME, egress.TRUST_NAME):
        path = Path(egress_folder) / name
        if path.is_file() and not path.is_symlink():
            found.append(Mount(source=path, target=f"{TUNNEL_CA_DIR}/{name}"))
    return found


def has_egress(config: dict[str, Any]) -> bool:
    """True for a container that reaches its session's egress proxy, by the relay or through the engine
    (it never joins a shared namespace: 127.0.0.1:3128 there is its own)."""
    bound = any(bind["bind"] == egress.CONTAINER_DIR for bind in config["host_config"].get("binds", {}).values())
    return bound or config.get("environment", {}).get("HTTP_PROXY") == _PROXY_URL


_FILE_TYPE = 0o170000
"""The file-type bits of a mode (S_IFMT)."""


def _no_device_nodes() -> str:
    """A seccomp profile that refuses to make character and block device nodes (mknod, mknodat) and
    allows everything else. Under gVisor a tmpfs ignores `nodev` and mknod needs no CAP_MKNOD, so a
    call could make `/tmp/fuse` (c 10 229) and reach gVisor's FUSE; runc refuses it already (all
    capabilities dropped). gVisor loads it only when registered with `--oci-seccomp` (scripts/
    ensure-engine.sh does; the envelope says `mknod` is unenforced otherwise). Under gVisor no other
    OCI profile is loaded at all: allowing the rest takes nothing away."""
    rules = []
    for name, mode_arg in (("mknod", 1), ("mknodat", 2)):
        for kind in (stat.S_IFCHR, stat.S_IFBLK):
            rules.append(
                {
                    "names": [name],
                    "action": "SCMP_ACT_ERRNO",
                    "errnoRet": errno.EPERM,
                    "args": [{"index": mode_arg, "value": _FILE_TYPE, "valueTwo": kind, "op": "SCMP_CMP_MASKED_EQ"}],
                }
            )
    profile = {
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_AARCH64"],
        "syscalls": rules,
    }
    return json.dumps(profile, separators=(",", ":"))


GVISOR_SECCOMP = _no_device_nodes()

FUSE_DEVICE = "/dev/fuse"
GVISOR_HIDDEN_DEVICES = ("/dev/net/tun", FUSE_DEVICE)
"""Devices gVisor provides that runc does not (a TUN device and FUSE, both emulated): hidden from
calls so the posture is one whatever the runtime. /dev/net becomes an empty read-only tmpfs;
/dev/fuse an empty read-only file."""


def _hide_gvisor_devices(host: dict[str, Any]) -> None:
    host["tmpfs"] = {**host["tmpfs"], "/dev/net": "ro,nosuid,nodev,noexec,size=4k,mode=0555"}
    host["binds"] = {
        **host["binds"],
        str(_empty_file()): {"bind": FUSE_DEVICE, "mode": "ro"},
        str(nodev_source()): {"bind": NODEV_TARGET, "mode": "ro"},
    }


def _empty_file() -> Path:
    """A read-only empty file owned by this process, bound over /dev/fuse under gVisor."""
    path = Path(tempfile.gettempdir()) / f"harness-empty-{os.getuid()}"
    if not path.is_file() or path.stat().st_size:
        fd, tmp = tempfile.mkstemp(dir=path.parent)
        os.close(fd)
        os.chmod(tmp, 0o444)
        os.replace(tmp, path)
    return path


def config_key(config: dict[str, Any]) -> str:
    """Stable digest of a container config: two calls may share a pool only if these match."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]
