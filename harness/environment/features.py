"""A devcontainer.json's `features`, run only when the user allows them (`[devcontainer_features."ID"]`).

A feature is a folder with `devcontainer-feature.json` and an `install.sh` that runs as root at build
time: a registry's code, or the repository's own (`./NAME`). harness runs a feature only when the
user's allowlist names its id and pins it (the version its metadata says, or the SHA-256 of its
archive or folder); it comes from the source the allowlist gives on this machine (a folder, or the
archive a registry serves), else from its OCI registry (harness.environment.registry), checked against the
pins. A reference asking for another major or minor version than the pinned one is not run. Of a
feature's metadata, its options become its install script's variables, its `containerEnv` the
image's (the same rules as the file's own), its `onCreateCommand`/`updateContentCommand`/
`postCreateCommand` setup commands before the file's; what would reach the engine (`privileged`,
`capAdd`, `securityOpt`, `init`, `mounts`, `entrypoint`) and what runs at every start is listed as
not applied. Install order: `overrideFeatureInstallOrder`, then `dependsOn`/`installsAfter` among
the features being installed (one depending on a feature that is not is not run), then the file's
order.

`layout` writes the build context the composition root hands to the engine."""

from __future__ import annotations

import hashlib
import io
import re
import shlex
import tarfile
from pathlib import Path
from typing import Any, NamedTuple

from harness.config import Dropped, Feature, FeatureAllow
from harness.environment.registry import fetch, is_registry_reference
from harness.errors import UsageError

MAX_BYTES = 64 * 1024**2
"""A feature (archive or folder) larger than this is not read."""
MAX_FILES = 4096
NEVER = {
    "privileged": "a privileged container",
    "capAdd": "added capabilities",
    "securityOpt": "engine security options",
    "init": "an init process of the engine's",
    "mounts": "mounts of this machine's paths",
    "entrypoint": "a process of its own at every start",
    "postStartCommand": "runs at every start",
    "postAttachCommand": "runs at every attach of an editor",
}
"""Keys of a feature's metadata never applied, with why."""
LIFECYCLE = ("onCreateCommand", "updateContentCommand", "postCreateCommand")
_SAFE_PATH = re.compile(r"(/[A-Za-z0-9_.+-]+)+")
BUILTIN = {
    "_REMOTE_USER": "root",
    "_CONTAINER_USER": "root",
    "_REMOTE_USER_HOME": "/root",
    "_CONTAINER_USER_HOME": "/root",
}
"""The variables the spec gives every install script (harness's calls run as their own user, not these)."""


class Resolved(NamedTuple):
    features: list[Feature]
    commands: list[str]
    """The features' lifecycle commands, in install order (before the file's own)."""


def reference(ref: str) -> tuple[str, str | None]:
    """(id, the version asked) of a feature reference: `REGISTRY/PATH/NAME:TAG`, `...@sha256:D`,
    a repository's own `./NAME`, or an archive's address."""
    if ref.startswith(("./", "../")):
        return ref.rstrip("/"), None
    if "://" in ref:
        return ref, None
    if "@" in ref:
        ident, _, digest = ref.partition("@")
        return ident, digest
    name = ref.rsplit("/", 1)[-1]
    if ":" in name:
        cut = ref.rfind(":")
        return ref[:cut], ref[cut + 1 :]
    return ref, None


def asks_other(asked: str | None, version: str) -> bool:
    """A reference's tag (`1`, `1.6`, `latest`) does not admit the pinned version (a manifest digest
    is checked by the registry's answer instead)."""
    if not asked or asked == "latest" or asked.startswith("sha256:"):
        return False
    return version.split(".")[: len(asked.split("."))] != asked.split(".")


def resolve(
    features: Any,
    allow: dict[str, FeatureAllow],
    *,
    folder: Path,
    root: Path,
    relative: str,
    order: Any,
    dropped: list[Dropped],
) -> Resolved:
    """The allowed features of a devcontainer.json's `features` (each other one listed in dropped)."""
    if not isinstance(features, dict):
        raise UsageError(f"{relative}: features must be an object of feature references")
    found: dict[str, tuple[Feature, dict[str, Any]]] = {}
    for ref, value in features.items():
        ref = str(ref)
        ident, asked = reference(ref)
        entry = allow.get(ident)
        key = f"features {ident[:200]}"
        local = ident.startswith(("./", "../"))
        source = _local(folder, ident, root, relative) if local else (entry.source if entry else None)
        if entry is None:
            pin = f'; pin it: [devcontainer_features."{ident}"] sha256 = "{tree_digest(source)}"' if source else ""
            dropped.append(Dropped(key=key, why=f"not in your allowlist: its install script would run as root{pin}"))
            continue
        fetched = source is None and not local and is_registry_reference(ident)
        if fetched:
            tag = asked if asked and asked.startswith("sha256:") else entry.version or asked or "latest"
            source = fetch(ident, tag, layer_digest=entry.digest)
        if source is None:
            dropped.append(
                Dropped(key=key, why="your allowlist gives no source, and it is no registry's: give its archive")
            )
            continue
        files, digest = read_source(source, where=f'[devcontainer_features."{ident}"] source')
        metadata = _metadata(files, ident)
        version = str(metadata.get("version", ""))
        if entry.digest is not None and entry.digest != digest:
            if local:
                dropped.append(Dropped(key=key, why=f"its content (sha256 {digest}) is not what your allowlist pins"))
                continue
            raise UsageError(f'[devcontainer_features."{ident}"]: {source} has sha256 {digest}, not the pinned one')
        if entry.version is not None and entry.version != version:
            if local:
                dropped.append(Dropped(key=key, why=f"its version {version!r} is not the pinned {entry.version!r}"))
                continue
            raise UsageError(
                f'[devcontainer_features."{ident}"]: {source} is version {version!r}, not the pinned {entry.version!r}'
            )
        if asks_other(asked, version):
            dropped.append(Dropped(key=key, why=f"the file asks for version {asked}; your allowlist pins {version}"))
            continue
        options = _options(value, metadata, key, dropped)
        environment = environment_of(metadata.get("containerEnv", {}), f"{key} containerEnv", dropped)
        for name in sorted(set(metadata) & set(NEVER)):
            dropped.append(Dropped(key=f"{key} {name}", why=NEVER[name]))
        feature = Feature(
            id=ident, source=str(source), fetched=fetched, version=version, sha256=digest,
            options=options, environment=environment,
        )  # fmt: skip
        found[ident] = (feature, metadata)
    ordered = _ordered(found, order, dropped)
    commands = [line for ident in ordered for name in LIFECYCLE for line in _lines(found[ident][1].get(name))]
    return Resolved([found[ident][0] for ident in ordered], commands)


def environment_of(value: Any, key: str, dropped: list[Dropped]) -> dict[str, str]:
    """A `containerEnv` as the image's variables: never a variable harness's calls depend on, PATH
    only extended (`DIR:${PATH}`, absolute directories of plain characters) and never replaced."""
    if not isinstance(value, dict):
        dropped.append(Dropped(key=key, why="not an object of variables"))
        return {}
    kept: dict[str, str] = {}
    for name, raw in value.items():
        text = str(raw) if isinstance(raw, str | int | float | bool) else None
        name = str(name)
        extension = name == "PATH" and text is not None and _path_extension(text) is not None
        if text is not None and (extension or (_NAME.fullmatch(name) and not reserved(name) and "\x00" not in text)):
            kept[name] = text
        elif reserved(name) and name not in RESERVED:
            dropped.append(Dropped(key=f"{key} {name!r}", why="a variable the loader or the C library acts on"))
        else:
            dropped.append(Dropped(key=f"{key} {name[:80]!r}", why="not a variable harness sets"))
    return kept


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
RESERVED = {"HOME", "PATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"}
"""Variables harness's calls depend on (the egress relay, the user's home, the loader): never set from
a file (PATH may only be extended)."""
LOADER = frozenset(
    {
        "GCONV_PATH", "GETCONF_DIR", "HOSTALIASES", "LOCALDOMAIN", "LOCPATH", "MALLOC_TRACE", "NIS_PATH",
        "NLSPATH", "RESOLV_HOST_CONF", "RES_OPTIONS", "TZDIR", "GLIBC_TUNABLES",
        "NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "BASH_ENV", "ENV",
    }
)  # fmt: skip
"""Besides every `LD_*`: what glibc ignores for a setuid program because it loads code or files
named by it (its unsecure list), the tunables, the proxy bypass, and what a shell sources at start."""


def reserved(name: str) -> bool:
    """A variable no file may set: RESERVED, the dynamic loader's (`LD_*`: LD_AUDIT loads a library
    into every process, harness's call stub included), and LOADER."""
    return name in RESERVED or name.startswith("LD_") or name in LOADER


def _path_extension(text: str) -> tuple[list[str], list[str]] | None:
    """(directories before, after) of a PATH that keeps the image's own (`${PATH}` or
    `${containerEnv:PATH}` once), or None."""
    parts = text.replace("${containerEnv:PATH}", "${PATH}").split(":")
    kept = [n for n, part in enumerate(parts) if part in ("${PATH}", "$PATH")]
    if len(kept) != 1:
        return None
    before, after = parts[: kept[0]], parts[kept[0] + 1 :]
    if not all(_SAFE_PATH.fullmatch(part) for part in before + after) or not before + after:
        return None
    return before, after


def path_line(text: str) -> str:
    """The Dockerfile instruction of a PATH extension (its directories checked: plain characters only)."""
    extension = _path_extension(text)
    if extension is None:
        raise ValueError(f"not a PATH extension: {text!r}")
    before, after = extension
    return "ENV PATH=" + ":".join([*before, "${PATH}", *after]) + "\n"


def read_source(source: Path, *, where: str) -> tuple[dict[str, bytes], str]:
    """(files by path, sha256) of a feature's folder or archive; UsageError naming what is wrong."""
    source = Path(source)
    if source.is_symlink():
        raise UsageError(f"{where}: {source} is a link: give the folder or archive itself")
    if source.is_dir():
        files = _folder(source, where)
        return files, _digest(files)
    if not source.is_file():
        raise UsageError(f"{where}: {source} is neither a folder nor an archive on this machine")
    if source.stat().st_size > MAX_BYTES:
        raise UsageError(f"{where}: {source} is larger than {MAX_BYTES // 1024**2} MiB")
    data = source.read_bytes()
    return _archive(data, source, where), hashlib.sha256(data).hexdigest()


def tree_digest(folder: Path) -> str:
    """The SHA-256 harness pins a feature's folder by (its files' paths, modes and contents)."""
    try:
        return _digest(_folder(folder, str(folder)))
    except UsageError:
        return "?"


def _digest(files: dict[str, bytes]) -> str:
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(f"{name}\0{len(files[name])}\0".encode() + files[name])
    return digest.hexdigest()


def _folder(folder: Path, where: str) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    total = 0
    for path in sorted(folder.rglob("*")):
        if path.is_symlink():
            raise UsageError(f"{where}: {path} is a link: a feature's files are its own")
        if path.is_file():
            data = path.read_bytes()
            total += len(data)
            files[path.relative_to(folder).as_posix()] = data
            if total > MAX_BYTES or len(files) > MAX_FILES:
                raise UsageError(f"{where}: {folder} is larger than a feature may be")
    return files


def _archive(data: bytes, source: Path, where: str) -> dict[str, bytes]:
    """The regular files of a feature's archive (links, devices, absolute or `..` paths refused)."""
    files: dict[str, bytes] = {}
    total = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as archive:
            for member in archive:
                name = member.name.removeprefix("./").rstrip("/")
                if member.isdir() or not name:
                    continue
                if not member.isreg() or name.startswith("/") or ".." in name.split("/"):
                    raise UsageError(f"{where}: {source} holds {member.name!r}, not a plain file inside it")
                total += member.size
                if total > MAX_BYTES or len(files) >= MAX_FILES:
                    raise UsageError(f"{where}: {source} unpacks larger than a feature may be")
                handle = archive.extractfile(member)
                files[name] = handle.read() if handle is not None else b""
    except (tarfile.TarError, EOFError, OSError) as error:
        raise UsageError(f"{where}: {source} is not a tar archive: {error}") from None
    return files


def _metadata(files: dict[str, bytes], ident: str) -> dict[str, Any]:
    from harness.environment import jsonc

    if "install.sh" not in files or "devcontainer-feature.json" not in files:
        raise UsageError(f"feature {ident}: its source holds no install.sh and devcontainer-feature.json")
    try:
        data = jsonc.loads(files["devcontainer-feature.json"].decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as error:
        raise UsageError(f"feature {ident}: devcontainer-feature.json is not JSON: {error}") from None
    if not isinstance(data, dict):
        raise UsageError(f"feature {ident}: devcontainer-feature.json holds no object")
    return data


def _local(folder: Path, ident: str, root: Path, relative: str) -> Path | None:
    """A repository's own feature folder (beside the devcontainer.json), never through a link."""
    target = (folder / ident).resolve()
    if root not in target.parents or not target.is_dir() or (folder / ident).is_symlink():
        return None
    return target


def option_variable(name: str) -> str:
    """The install script's variable of an option, as the spec names it."""
    return re.sub(r"^[\d_]+", "_", re.sub(r"[^\w]", "_", name)).upper()


def _options(value: Any, metadata: dict[str, Any], key: str, dropped: list[Dropped]) -> dict[str, str]:
    """Each declared option's value (the file's, else its default) under its variable's name."""
    given: dict[str, Any] = {"version": value} if isinstance(value, str) else (value if isinstance(value, dict) else {})
    declared: dict[str, Any] = metadata["options"] if isinstance(metadata.get("options"), dict) else {}
    options: dict[str, str] = {}
    for name, spec in declared.items():
        chosen = given.get(name, spec.get("default", "") if isinstance(spec, dict) else "")
        text = str(chosen).lower() if isinstance(chosen, bool) else str(chosen)
        if "\x00" not in text and isinstance(chosen, str | int | float | bool):
            options[option_variable(str(name))] = text
    for name in sorted(set(given) - set(declared)):
        dropped.append(Dropped(key=f"{key} option {str(name)[:80]!r}", why="the feature declares no such option"))
    return options


def _ordered(found: dict[str, tuple[Feature, dict[str, Any]]], order: Any, dropped: list[Dropped]) -> list[str]:
    """Install order: the file's `overrideFeatureInstallOrder` first, then each after what it depends
    on or installs after (when that is installed), else in the file's order."""
    removed = True
    while removed:  # a feature depending on one that is not installed is not either
        removed = False
        for ident, (_, metadata) in list(found.items()):
            needs: dict[str, Any] = metadata["dependsOn"] if isinstance(metadata.get("dependsOn"), dict) else {}
            missing = [reference(str(ref))[0] for ref in needs if reference(str(ref))[0] not in found]
            if missing:
                dropped.append(Dropped(key=f"features {ident}", why=f"depends on {missing[0]}, which is not installed"))
                del found[ident]
                removed = True
    first = [reference(str(ref))[0] for ref in order] if isinstance(order, list) else []
    pending = [ident for ident in first if ident in found] + [ident for ident in found if ident not in first]
    placed: list[str] = []
    while pending:
        for ident in pending:
            metadata = found[ident][1]
            after = [*_listed(metadata.get("dependsOn")), *_listed(metadata.get("installsAfter"))]
            waits = {reference(str(ref))[0] for ref in after} & set(pending) - {ident}
            if not waits:
                break
        else:
            ident = pending[0]  # a cycle: the file's order
        placed.append(ident)
        pending.remove(ident)
    return placed


def _listed(value: Any) -> list[str]:
    """The references of a `dependsOn` (an object) or `installsAfter` (an array)."""
    return [str(item) for item in value] if isinstance(value, dict | list) else []


def _lines(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value] if value.strip() else []
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return [shlex.join(value)]
    if isinstance(value, dict):
        return [line for item in value.values() for line in _lines(item)]
    return []


def layout(features: list[Feature], into: Path, path: str | None = None) -> tuple[str, dict[str, str]]:
    """A build context in `into` installing features in order, then extending PATH as the file's
    `containerEnv` asks (path): (its Dockerfile, its build args). Each feature's files are read
    again and must be what was pinned; every value (an option, a variable) reaches the build as a
    build argument or a shell-quoted file, never as Dockerfile text (a PATH's directories are
    checked to be plain characters)."""
    lines = ["ARG BASE", "FROM ${BASE}", "USER root"]
    args: dict[str, str] = {}
    for n, feature in enumerate(features):
        files, digest = read_source(Path(feature.source), where=f"feature {feature.id}")
        if digest != feature.sha256:
            raise UsageError(f"feature {feature.id}: {feature.source} changed since it was read")
        target = into / str(n)
        for name, data in files.items():
            written = target / name
            written.parent.mkdir(parents=True, exist_ok=True)
            written.write_bytes(data)
        variables = {**BUILTIN, **feature.options}
        (target / "devcontainer-features.env").write_text(
            "".join(f"{name}={shlex.quote(value)}\n" for name, value in variables.items())
        )
        lines += [
            f"COPY {n}/ /tmp/harness-features/{n}/",
            f"RUN cd /tmp/harness-features/{n} && set -a && . ./devcontainer-features.env && set +a "
            "&& chmod +x install.sh && ./install.sh",
        ]
        for m, (name, value) in enumerate(sorted(feature.environment.items())):
            if name == "PATH":
                lines.append(path_line(value).rstrip("\n"))
            else:
                lines += [f"ARG HARNESS_F{n}_{m}", f"ENV {name}=${{HARNESS_F{n}_{m}}}"]
                args[f"HARNESS_F{n}_{m}"] = value
    if features:
        lines.append("RUN rm -rf /tmp/harness-features")
    if path is not None:
        lines.append(path_line(path).rstrip("\n"))
    dockerfile = "\n".join(lines) + "\n"
    (into / "Dockerfile").write_text(dockerfile)
    return dockerfile, args


def summary(features: list[Feature]) -> list[str]:
    """One line per installed feature (its id, version and digest)."""
    return [f"{f.id} {f.version or '?'} (sha256 {f.sha256[:12]})" for f in features]
