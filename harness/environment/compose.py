"""A devcontainer described by docker compose (`dockerComposeFile`, `service`, `runServices`), read as
hostile input: harness never runs compose. The file's `service` is the environment (its `image` or
`build`, its `environment`), each other service it runs becomes one of harness's services (an image
the engine has, its command, environment, healthcheck, user other than root, tmpfs paths), on the
session's network with no route out. What would reach this machine or the engine (`privileged`,
`cap_add`, `volumes`, `network_mode`, published `ports`, `devices`, `pid`, ...) is listed, never
applied; compose's `${VAR}` interpolation never reads this machine's environment (a default given in
the file is used, else the empty string, and the use is listed).

Pure: the compose files' text in, the parts of a `Devcontainer` out."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import ValidationError

from harness.config import SERVICE_NAME, Dropped, ServiceConfig
from harness.errors import UsageError

MAX_BYTES = 512 * 1024
MAX_NODES = 100_000
"""Values of the compose files walked at most (aliases may make a small file a very large tree)."""
TAKEN_MAIN = {"image", "build", "environment"}
TAKEN_SERVICE = {"image", "command", "environment", "healthcheck", "expose", "ports", "user", "tmpfs"}
SILENT = {"depends_on", "restart", "container_name", "hostname", "stdin_open", "tty", "labels", "networks", "profiles"}
"""Keys about how compose orders or names its containers: nothing to apply, nothing to warn of."""
WHY = {
    "privileged": "a privileged container",
    "cap_add": "added capabilities",
    "security_opt": "engine security options",
    "volumes": "mounts of this machine's paths or the engine socket",
    "network_mode": "the engine's networks (a service's network has no route out)",
    "ports": "ports published on this machine",
    "devices": "devices of this machine",
    "pid": "this machine's process namespace",
    "ipc": "this machine's IPC namespace",
    "userns_mode": "this machine's user namespace",
    "extra_hosts": "names resolved to this machine's addresses",
    "env_file": "variables from files compose reads on this machine",
    "user": "harness runs every call as its own unprivileged user",
    "command": "the environment's own command: harness starts every call",
    "entrypoint": "a process of its own",
    "init": "an init process of the engine's",
    "build": "a service built from a Dockerfile: harness runs services from images the engine has",
}
_INTERPOLATION = re.compile(r"\$(?:\$|\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")
_SERVICE_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")


class Composed(NamedTuple):
    image: str | None
    dockerfile: str | None
    context: str
    build_args: dict[str, str]
    target: str | None
    environment: dict[str, Any]
    """The main service's `environment` (the file's containerEnv goes over it)."""
    services: dict[str, ServiceConfig]


def read(data: dict[str, Any], relative: str, folder: Path, root: Path, dropped: list[Dropped]) -> Composed:
    """The environment and services a devcontainer's compose files describe."""
    import yaml

    names = data["dockerComposeFile"]
    names = [names] if isinstance(names, str) else names
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
        raise UsageError(f"{relative}: dockerComposeFile must be a file name or a list of them")
    services: dict[str, dict[str, Any]] = {}
    places: dict[str, Path] = {}
    for name in names:
        path = _file(folder, name, root, relative)
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError, RecursionError) as error:
            raise UsageError(f"{relative}: {name} is not YAML: {str(error).splitlines()[0][:200]}") from None
        loaded = _interpolated(loaded, dropped, [0])
        declared = loaded.get("services") if isinstance(loaded, dict) else None
        if not isinstance(declared, dict):
            raise UsageError(f"{relative}: {name} declares no services")
        for service, body in declared.items():
            if not isinstance(body, dict):
                raise UsageError(f"{relative}: {name}: service {service!r} is not a mapping")
            services[str(service)] = {**services.get(str(service), {}), **body}  # a later file overrides
            places[str(service)] = path.parent
    main = data.get("service")
    if not isinstance(main, str) or main not in services:
        raise UsageError(f"{relative}: service must name one of the compose files' services ({', '.join(services)})")
    composed = _main(main, services[main], places[main], root, relative, dropped)
    running = data.get("runServices")
    others = [s for s in (running if isinstance(running, list) else services) if s != main]
    for name in others:
        if name not in services:
            raise UsageError(f"{relative}: runServices names {name!r}, which no compose file declares")
        if not SERVICE_NAME.fullmatch(str(name)):
            raise UsageError(f"{relative}: service name {str(name)!r} is no host name a call could reach it by")
        service = _service(str(name), services[name], dropped)
        if service is not None:
            composed.services[str(name)] = service
    return composed


def _file(folder: Path, name: str, root: Path, relative: str) -> Path:
    path = folder / name
    target = path.resolve()
    if root not in target.parents:
        raise UsageError(f"{relative}: {name!r} is outside the repository")
    if path.is_symlink() or not target.is_file():
        raise UsageError(f"{relative}: its compose file {name} is not a file in the repository")
    if target.stat().st_size > MAX_BYTES:
        raise UsageError(f"{relative}: {name} is larger than {MAX_BYTES // 1024} KiB: not read")
    return target


def _main(name: str, body: dict[str, Any], place: Path, root: Path, relative: str, dropped: list[Dropped]) -> Composed:
    """The environment: the main service's image or build and its variables."""
    image = body.get("image")
    dockerfile, context, args, target = None, ".", {}, None
    build = body.get("build")
    if build is not None:
        build = {"context": build} if isinstance(build, str) else build
        if not isinstance(build, dict):
            raise UsageError(f"{relative}: service {name}'s build must be a path or a mapping")
        context = inside(place, str(build.get("context", ".")), root, relative)
        dockerfile = inside(root / context, str(build.get("dockerfile", "Dockerfile")), root, relative)
        if not (root / dockerfile).is_file() or (root / dockerfile).is_symlink():
            raise UsageError(f"{relative}: service {name}'s Dockerfile {dockerfile} is not a file in the repository")
        args = _pairs(build.get("args", {}))
        target = str(build["target"]) if build.get("target") is not None else None
        for key in sorted(set(build) - {"context", "dockerfile", "args", "target"}):
            dropped.append(Dropped(key=f"{name} build.{key}", why="engine build options"))
    elif not isinstance(image, str) or not image:
        raise UsageError(f"{relative}: service {name} has neither an image nor a build")
    for key in sorted(set(body) - TAKEN_MAIN - SILENT):
        dropped.append(Dropped(key=f"{name} {key}", why=WHY.get(key, "not a key harness applies")))
    return Composed(
        image=None if build is not None else str(image),
        dockerfile=dockerfile,
        context=context,
        build_args=args,
        target=target,
        environment=_pairs(body.get("environment", {})),
        services={},
    )


def _service(name: str, body: dict[str, Any], dropped: list[Dropped]) -> ServiceConfig | None:
    """One of harness's services for a compose service, or None (listed) when it cannot be one."""
    image = body.get("image")
    if not _SERVICE_NAME.fullmatch(name):
        dropped.append(Dropped(key=f"service {name[:80]!r}", why="not a name a service may have"))
        return None
    if not isinstance(image, str) or not image:
        dropped.append(Dropped(key=f"{name}", why=WHY["build"]))
        return None
    for key in sorted(set(body) - TAKEN_SERVICE - SILENT):
        dropped.append(Dropped(key=f"{name} {key}", why=WHY.get(key, "not a key harness applies")))
    if body.get("ports"):
        dropped.append(Dropped(key=f"{name} ports", why="published on this machine: calls reach it as NAME:PORT"))
    user = str(body["user"]) if body.get("user") is not None else None
    fields: dict[str, Any] = {
        "image": image,
        "command": _argv(body.get("command")),
        "env": {k: v for k, v in _pairs(body.get("environment", {})).items() if "\x00" not in k + v},
        "health": _health(body.get("healthcheck")),
        "ports": _ports([*(body.get("expose") or []), *(body.get("ports") or [])]),
        "tmpfs": [body["tmpfs"]] if isinstance(body.get("tmpfs"), str) else list(body.get("tmpfs") or []),
        "user": user,
    }
    try:
        return ServiceConfig(**fields)
    except ValidationError as error:  # root as its user, a tmpfs over the workspace...
        problem = "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in error.errors())
        dropped.append(Dropped(key=f"{name}", why=problem[:200] or "not a service harness can run"))
        return None


def _argv(value: Any) -> list[str] | None:
    if isinstance(value, str):
        try:
            return shlex.split(value)
        except ValueError:
            return ["sh", "-c", value]
    if isinstance(value, list) and all(isinstance(v, str | int | float) for v in value):
        return [str(v) for v in value]
    return None


def _health(value: Any) -> list[str] | None:
    """A compose healthcheck's test as an argv (`CMD` as given, `CMD-SHELL` and a string through sh)."""
    test = value.get("test") if isinstance(value, dict) else None
    if isinstance(test, str):
        return ["sh", "-c", test]
    if isinstance(test, list) and test and all(isinstance(t, str) for t in test):
        if test[0] == "CMD":
            return test[1:] or None
        if test[0] == "CMD-SHELL" and len(test) > 1:
            return ["sh", "-c", test[1]]
    return None


def _ports(values: list[Any]) -> list[int]:
    """The container side of `expose` and `ports` entries (`8000`, `"8000:80"`, `"127.0.0.1:8000:80/tcp"`)."""
    found = []
    for value in values:
        text = str(value.get("target", "")) if isinstance(value, dict) else str(value)
        last = text.rsplit(":", 1)[-1].split("/")[0]
        if last.isdigit() and 0 < int(last) < 65536:
            found.append(int(last))
    return sorted(set(found))


def _pairs(value: Any) -> dict[str, str]:
    """A compose mapping or `KEY=VALUE` list as strings (a key without a value, which compose takes
    from this machine, is left out)."""
    if isinstance(value, dict):
        return {str(k): _scalar(v) for k, v in value.items() if v is not None and not isinstance(v, dict | list)}
    if isinstance(value, list):
        return dict(str(item).split("=", 1) for item in value if "=" in str(item))
    return {}


def _scalar(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def inside(folder: Path, value: str, root: Path, relative: str) -> str:
    """value (relative to the file's folder) as a path relative to the repository, which it may not
    leave (through `..` or a link)."""
    target = (folder / value).resolve()
    if target != root and root not in target.parents:
        raise UsageError(f"{relative}: {value!r} is outside the repository: a build sees the repository only")
    return target.relative_to(root).as_posix() or "."


def _interpolated(value: Any, dropped: list[Dropped], walked: list[int]) -> Any:
    """compose's `${VAR}`, `${VAR:-default}` and `$VAR` without this machine's environment: the
    default the file gives, else empty (each use listed); `$$` is a dollar sign."""
    walked[0] += 1
    if walked[0] > MAX_NODES:
        raise UsageError(f"the compose files hold more than {MAX_NODES} values: not read")
    if isinstance(value, dict):
        return {key: _interpolated(item, dropped, walked) for key, item in value.items()}
    if isinstance(value, list):
        return [_interpolated(item, dropped, walked) for item in value]
    if not isinstance(value, str):
        return value

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1) or match.group(4)
        operator, default = match.group(2), match.group(3) or ""
        used = default if operator in (":-", "-") else ""
        dropped.append(Dropped(key=f"${{{name}}} (compose)", why="a variable of this machine's: " + (
            "the file's default used" if used else "expanded to empty")))  # fmt: skip
        return used

    return _INTERPOLATION.sub(one, value)
