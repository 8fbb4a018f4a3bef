"""A repository's `devcontainer.json`, read as hostile input (`--setup devcontainer`).

What is honoured: the environment's `image` or `build` (a Dockerfile inside the repository, its
build args with nothing of this machine's expanded), and the commands that prepare the tree
(`onCreateCommand`, `updateContentCommand`, `postCreateCommand`, in that order), which run once in
harness's setup phase. What would reach this machine or the engine is never applied and is listed,
each with why: `initializeCommand` (runs on the host), `runArgs`, `mounts`, `workspaceMount`,
`privileged`, `capAdd`, `securityOpt`, `init`, `overrideCommand`, ports, the commands that run at
every start or attach, users, and every `${localEnv:...}` or host path variable (expanded to empty).
`features` run install scripts as root at build time: only those the user allows, pinned, from this
machine (harness.environment.features). `hostRequirements` become the calls' limits, never above the user's.
`containerEnv` becomes the image's environment (what the lifecycle commands and every call see), never
a variable harness's calls depend on (PATH only extended). A compose-described one (`dockerComposeFile`)
takes its `service` as the environment and its other services as harness's (harness.environment.compose).

Pure: text in, a `Devcontainer` out (the engine work is the composition root's)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

from harness.config import Devcontainer, Dropped, FeatureAllow
from harness.environment.compose import inside
from harness.environment.compose import read as read_compose
from harness.environment.features import environment_of, resolve
from harness.errors import UsageError
from sandbox.spec import parse_size

MAX_BYTES = 512 * 1024
"""A devcontainer.json larger than this is not read (they are a few hundred bytes)."""
LIFECYCLE = ("onCreateCommand", "updateContentCommand", "postCreateCommand")
"""The commands that prepare the tree, in the order the spec runs them (each once, at creation)."""
DROPPED = {
    "initializeCommand": "runs on the host before the container exists",
    "runArgs": "engine flags (privileges, mounts, devices, network)",
    "mounts": "mounts of this machine's paths or the engine socket",
    "workspaceMount": "a mount of this machine's path",
    "workspaceFolder": "harness's workspace is /workspace",
    "privileged": "a privileged container",
    "capAdd": "added capabilities",
    "securityOpt": "engine security options (seccomp, AppArmor off)",
    "init": "an init process of the engine's",
    "overrideCommand": "the container's own command",
    "forwardPorts": "ports forwarded to this machine",
    "appPort": "ports published on this machine",
    "portsAttributes": "ports forwarded to this machine",
    "otherPortsAttributes": "ports forwarded to this machine",
    "postStartCommand": "runs at every start: harness's calls each start a fresh container",
    "postAttachCommand": "runs at every attach of an editor",
    "remoteUser": "harness runs every call as its own unprivileged user",
    "containerUser": "harness runs every call as its own unprivileged user",
    "updateRemoteUserUID": "harness runs every call as its own unprivileged user",
    "remoteEnv": "variables of an editor's processes",
    "shutdownAction": "harness removes every container it starts",
    "gpuRequirements": "no device reaches a call",
}
"""Keys never applied, with why (what each would do to this machine or the engine)."""
IGNORED = {"name", "$schema", "customizations", "waitFor", "userEnvProbe", "secrets", "otherPortsAttributes"}
"""Keys about an editor's view of the container: nothing to apply, nothing to warn of."""
_VARIABLE = re.compile(r"\$\{([A-Za-z]+)(?::([^}]*))?\}")
_CONTAINER_VARIABLES = {"containerWorkspaceFolder": "/workspace", "containerWorkspaceFolderBasename": "workspace"}


def find(repo: Path) -> Path | None:
    """The repository's devcontainer.json (the spec's places, first found), never through a link."""
    root = Path(repo)
    candidates = [root / ".devcontainer" / "devcontainer.json", root / ".devcontainer.json"]
    folder = root / ".devcontainer"
    if folder.is_dir() and not folder.is_symlink():
        candidates += sorted(p / "devcontainer.json" for p in folder.iterdir() if p.is_dir() and not p.is_symlink())
    for path in candidates:
        if path.is_file() and not path.is_symlink() and not path.parent.is_symlink():
            return path
    return None


def read(repo: Path, allow: dict[str, FeatureAllow] | None = None) -> Devcontainer:
    """The repository's devcontainer, sanitised; UsageError naming what is wrong (no file, not JSON
    with comments, a build or compose file outside the repository, a feature source not what was pinned)."""
    root = Path(repo).resolve()
    path = find(root)
    if path is None:
        raise UsageError(
            f"--setup devcontainer: {repo} has no devcontainer.json (.devcontainer/devcontainer.json, "
            ".devcontainer.json or .devcontainer/NAME/devcontainer.json)"
        )
    relative = path.relative_to(root).as_posix()
    from sandbox.named import NamedFileError, read_named

    try:
        text = read_named(path, what=relative, limit=MAX_BYTES, follow=False).decode("utf-8")
    except NamedFileError as error:
        raise UsageError(f"--setup devcontainer: {error}") from None
    except UnicodeDecodeError as error:
        raise UsageError(f"{relative} cannot be read: {error}") from None
    return parse(text, relative, root, allow)


def parse(text: str, relative: str, root: Path, allow: dict[str, FeatureAllow] | None = None) -> Devcontainer:
    """A devcontainer.json's text (JSON with comments and trailing commas) as a Devcontainer; allow:
    the features the user allows (harness.environment.features)."""
    from harness.environment import jsonc

    try:
        data = jsonc.loads(text)
    except ValueError as error:
        raise UsageError(f"{relative} is not JSON with comments: {str(error).splitlines()[0][:200]}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{relative} holds no object: a devcontainer.json is one JSON object")
    dropped: list[Dropped] = []
    data = _expanded(data, dropped)
    found = Devcontainer(path=relative)
    folder = (root / relative).parent
    for key, value in data.items():
        if key == "image":
            found.image = _text(value, relative, key)
        elif key in ("build", "dockerFile", "dockerfile", "context", "dockerComposeFile", "service", "runServices"):
            continue  # below, together
        elif key in LIFECYCLE:
            continue  # below, in the spec's order
        elif key == "containerEnv":
            found.environment = environment_of(value, key, dropped)
        elif key in ("features", "overrideFeatureInstallOrder"):
            continue  # below, together
        elif key == "hostRequirements":
            found.limits = _requirements(value, relative, dropped)
        elif key in DROPPED:
            dropped.append(Dropped(key=key, why=DROPPED[key]))
        elif key not in IGNORED:
            dropped.append(Dropped(key=key, why="not a key harness knows"))
    if "dockerComposeFile" in data:
        _compose(data, found, relative, folder, root, dropped)
    else:
        _build(data, found, relative, folder, root, dropped)
    if "features" in data:
        found.features, found.commands = resolve(
            data["features"], allow or {}, folder=folder, root=root, relative=relative,
            order=data.get("overrideFeatureInstallOrder"), dropped=dropped,
        )  # fmt: skip
    for key in LIFECYCLE:
        if key in data:
            found.commands += _commands(data[key], relative, key)
    if found.image is None and found.dockerfile is None:
        raise UsageError(f"{relative} names neither an image nor a Dockerfile to build")
    found.dropped = list({d.key: d for d in dropped}.values())  # each once (a variable used twice)
    return found


def _compose(
    data: dict[str, Any], found: Devcontainer, relative: str, folder: Path, root: Path, dropped: list[Dropped]
) -> None:
    """The environment and services of a compose-described devcontainer (harness.environment.compose)."""
    composed = read_compose(data, relative, folder, root, dropped)
    found.image, found.dockerfile, found.context = composed.image, composed.dockerfile, composed.context
    found.build_args, found.target, found.services = composed.build_args, composed.target, composed.services
    found.environment = {**environment_of(composed.environment, "environment", dropped), **found.environment}


def _build(
    data: dict[str, Any], found: Devcontainer, relative: str, folder: Path, root: Path, dropped: list[Dropped]
) -> None:
    build = data.get("build")
    if build is not None and not isinstance(build, dict):
        raise UsageError(f"{relative}: build must be an object")
    build = dict(build or {})
    dockerfile = build.get("dockerfile", data.get("dockerFile", data.get("dockerfile")))
    if dockerfile is None:
        return
    context = build.get("context", data.get("context", "."))
    found.dockerfile = inside(folder, _text(dockerfile, relative, "build.dockerfile"), root, relative)
    built = root / found.dockerfile
    if not built.is_file() or built.is_symlink():
        raise UsageError(f"{relative}: its Dockerfile {found.dockerfile} is not a file in the repository")
    found.context = inside(folder, _text(context, relative, "build.context"), root, relative)
    found.build_args = _strings(build.get("args", {}), relative, "build.args")
    if build.get("target") is not None:
        found.target = _text(build["target"], relative, "build.target")
    for key in sorted(set(build) - {"dockerfile", "context", "args", "target"}):
        dropped.append(Dropped(key=f"build.{key}", why="engine build options (cache sources, options)"))


def _expanded(value: Any, dropped: list[Dropped]) -> Any:
    """Every `${...}` variable of the file: a container path as the spec says, anything of this
    machine's (`localEnv`, `localWorkspaceFolder`) as empty, each such use listed."""
    if isinstance(value, dict):
        return {key: _expanded(item, dropped) for key, item in value.items()}
    if isinstance(value, list):
        return [_expanded(item, dropped) for item in value]
    if not isinstance(value, str):
        return value

    def one(match: re.Match[str]) -> str:
        kind, argument = match.group(1), match.group(2) or ""
        if kind in _CONTAINER_VARIABLES:
            return _CONTAINER_VARIABLES[kind]
        if kind == "containerEnv":  # the container's own: kept for its image (a PATH extension)
            return match.group(0)
        if kind == "localEnv":
            name = argument.split(":", 1)[0]
            dropped.append(Dropped(key=f"${{localEnv:{name}}}", why="a variable of this machine's: expanded to empty"))
        else:
            dropped.append(Dropped(key=f"${{{kind}}}", why="a value of this machine's: expanded to empty"))
        return ""

    return _VARIABLE.sub(one, value)


def _requirements(value: Any, relative: str, dropped: list[Dropped]) -> dict[str, float]:
    """`hostRequirements` as asked limits (cpus; memory in bytes); capped by the user's when applied."""
    if not isinstance(value, dict):
        raise UsageError(f"{relative}: hostRequirements must be an object")
    asked: dict[str, float] = {}
    for key, item in value.items():
        try:
            if key == "cpus" and not isinstance(item, bool) and float(item) > 0:
                asked["cpus"] = float(item)
            elif key == "memory" and parse_size(item) >= 64 * 1024**2:
                asked["memory"] = float(parse_size(item))
            elif key in ("cpus", "memory"):
                dropped.append(
                    Dropped(key=f"hostRequirements.{key}", why=f"{str(item)[:40]!r} is below any usable limit")
                )
            elif key == "storage":
                dropped.append(
                    Dropped(key="hostRequirements.storage", why="the workspace's size is yours (--workspace-quota)")
                )
            else:
                dropped.append(
                    Dropped(key=f"hostRequirements.{str(key)[:80]}", why="no device or host resource reaches a call")
                )
        except (TypeError, ValueError, OverflowError):
            dropped.append(Dropped(key=f"hostRequirements.{key}", why=f"{str(item)[:40]!r} is not a number or a size"))
    return asked


def _commands(value: Any, relative: str, key: str) -> list[str]:
    """A lifecycle command: a string (a shell line), an array (one program and its arguments), or an
    object of named commands (run in the order given)."""
    if isinstance(value, str):
        return [value] if value.strip() else []
    if isinstance(value, list):
        if not value or not all(isinstance(v, str) for v in value):
            raise UsageError(f"{relative}: {key} must be a string, an array of strings or an object of them")
        return [shlex.join(value)]
    if isinstance(value, dict):
        return [line for item in value.values() for line in _commands(item, relative, key)]
    raise UsageError(f"{relative}: {key} must be a string, an array of strings or an object of them")


def _text(value: Any, relative: str, key: str) -> str:
    if not isinstance(value, str) or not value.strip() or "\x00" in value:
        raise UsageError(f"{relative}: {key} must be a non-empty string")
    return value


def _strings(value: Any, relative: str, key: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise UsageError(f"{relative}: {key} must be an object of strings")
    return {str(k): str(v) for k, v in value.items() if isinstance(v, str | int | float | bool)}


def metadata_dropped(label: str | None) -> list[Dropped]:
    """What an image's `devcontainer.metadata` label asks for that is never applied (the label is a
    JSON array of objects with the file's keys; harness applies none of them)."""
    import json

    if not label:
        return []
    try:
        entries = json.loads(label)
    except (ValueError, RecursionError):
        return [Dropped(key="devcontainer.metadata", why="the image's label is not JSON: not read")]
    entries = entries if isinstance(entries, list) else [entries]
    found = []
    for entry in entries:
        for key in entry if isinstance(entry, dict) else {}:
            if key in DROPPED or key in LIFECYCLE or key in ("features", "containerEnv", "entrypoint"):
                found.append(
                    Dropped(key=f"{key} (the image's devcontainer.metadata)", why="never applied from a label")
                )
    return list({d.key: d for d in found}.values())
