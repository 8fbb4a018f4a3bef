"""What a commit says it needs to run: the interpreter or toolchain version its files declare
(`requires-python`, `.python-version`, `go.mod`'s go line, `engines.node`, `rust-version`, ...),
read from the task's start state, and whether an image's version satisfies it.

A mined task carries the declaration in its tags (`environment`); `tasks check` probes the image's
own version once per image, picks an image that satisfies the declaration when the task's does not
(`--env-images`), and names a mismatch as the reason when the tests then fail."""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

VERSION_COMMANDS = {
    "python": ["python3", "-c", "import platform; print(platform.python_version())"],
    "go": ["go", "env", "GOVERSION"],
    "javascript": ["node", "--version"],
    "rust": ["rustc", "--version"],
}
"""What prints an image's version of each language's toolchain."""
RELEASE_TOOLCHAINS = {
    "bullseye": {"python": "3.9.2", "go": "1.15.15", "javascript": "12.22.12", "rust": "1.48.0"},
    "bookworm": {"python": "3.11.2", "go": "1.19.8", "javascript": "18.19.0", "rust": "1.63.0"},
    "trixie": {"python": "3.13.5", "go": "1.24.4", "javascript": "20.19.2", "rust": "1.85.0"},
}
"""What each Debian release ships, for choosing the one to build an environment from (the image
built is probed again: its own version is what a verdict reports)."""


RELEASED = {
    "python": {"3.8": "2019-10-14", "3.9": "2020-10-05", "3.10": "2021-10-04", "3.11": "2022-10-24",
               "3.12": "2023-10-02", "3.13": "2024-10-07", "3.14": "2025-10-07"},
    "javascript": {"12": "2019-04-23", "14": "2020-04-21", "16": "2021-04-20", "18": "2022-04-19", "20": "2023-04-18",
                   "22": "2024-04-24"},
}  # fmt: skip
"""When each interpreter line came out (Python minor, Node major): a commit older than an image's
interpreter may need one of its own time (`older_than`)."""


def older_than(language: str, version: str | None, date: str) -> str | None:
    """The requirement an environment of the commit's time meets (`<3.11`), when the image's version
    came out after the commit (date `YYYY-MM-DD`); None when it did not, or nothing is known."""
    numbers = normalize(language, version or "").split(".")
    if language not in RELEASED or len(numbers) < 2 or not date:
        return None
    line = ".".join(numbers[:2]) if language == "python" else numbers[0]
    released = RELEASED[language].get(line)
    if released is None or date >= released:
        return None
    return f"<{line}" if language == "python" else f"<{line}.0.0"


@dataclass(frozen=True)
class Declared:
    language: str
    requires: str
    """The requirement in the declaring file's own syntax (`>=3.8,<3.10`, `>=1.21`, `^18 || ^20`)."""
    source: str
    """The file (and key) it came from."""

    def as_tag(self) -> dict[str, str]:
        return {"language": self.language, "requires": self.requires, "source": self.source}


def declared(language: str, read: Callable[[str], bytes | None]) -> Declared | None:
    """The first declaration the start state makes for language; read(path) gives a root file's bytes."""
    for source, extract in _READERS.get(language, ()):
        data = read(source)
        if data is None:
            continue
        text = data.decode("utf-8", "replace")
        try:
            found = extract(text)
        except (ValueError, KeyError, TypeError, AttributeError):
            found = None
        if found:
            requires, key = found
            return Declared(language, requires.strip(), f"{source}{key}")
    return None


def satisfies(language: str, version: str, requires: str) -> bool | None:
    """Whether version meets the requirement; None when either cannot be read."""
    version = normalize(language, version)
    if not version:
        return None
    try:
        if language == "python":
            return Version(version) in _python_spec(requires)
        if language == "javascript":
            return _semver_range(requires, _triple(version))
        floor = _triple(requires.lstrip(">= v").split()[0])
        return _triple(version) >= floor
    except (InvalidSpecifier, InvalidVersion, ValueError, IndexError):
        return None


def normalize(language: str, printed: str) -> str:
    """The version number in what a toolchain printed (`go1.19.8`, `v18.19.0`, `rustc 1.63.0 (...)`)."""
    found = re.search(r"(\d+\.\d+(?:\.\d+)?)", printed or "")
    return found.group(1) if found else ""


def pick(language: str, requires: str, versions: Mapping[str, str | None], preferred: Iterable[str]) -> str | None:
    """The first image (preferred order first) whose version satisfies requires, or None."""
    order = list(dict.fromkeys([*preferred, *versions]))
    for image in order:
        version = versions.get(image)
        if version and satisfies(language, version, requires):
            return image
    return None


def release_for(language: str, requires: str) -> str | None:
    """The Debian release whose toolchain meets requires (newest first), or None."""
    for release in reversed(RELEASE_TOOLCHAINS):
        version = RELEASE_TOOLCHAINS[release].get(language)
        if version and satisfies(language, version, requires):
            return release
    return None


# --- the declaring files ------------------------------------------------------------------------


def _pyproject(text: str) -> tuple[str, str] | None:
    data = tomllib.loads(text)
    requires = data.get("project", {}).get("requires-python")
    if isinstance(requires, str):
        return requires, ":project.requires-python"
    poetry = data.get("tool", {}).get("poetry", {}).get("dependencies", {}).get("python")
    if isinstance(poetry, str):
        return _poetry(poetry), ":tool.poetry.dependencies.python"
    return None


def _setup_cfg(text: str) -> tuple[str, str] | None:
    found = re.search(r"^\s*python_requires\s*=\s*(.+)$", text, re.MULTILINE)
    return (found.group(1), ":python_requires") if found else None


def _setup_py(text: str) -> tuple[str, str] | None:
    found = re.search(r"python_requires\s*=\s*['\"]([^'\"]+)['\"]", text)
    return (found.group(1), ":python_requires") if found else None


def _pinned(text: str) -> tuple[str, str] | None:
    """`.python-version` / `.nvmrc` / `.node-version`: one version (3.8, 3.8.10, v18) means that line."""
    line = next((item.strip() for item in text.splitlines() if item.strip() and not item.startswith("#")), "")
    found = re.fullmatch(r"(?:python-|v)?(\d+(?:\.\d+){0,2})", line)
    if not found:
        return None
    parts = found.group(1).split(".")
    return (f"=={'.'.join(parts[:2])}.*" if len(parts) >= 2 else f"=={parts[0]}.*"), ""


def _pinned_node(text: str) -> tuple[str, str] | None:
    found = _pinned(text)
    return (found[0].removeprefix("==").replace(".*", ".x"), "") if found else None


def _go_mod(text: str) -> tuple[str, str] | None:
    found = re.search(r"^go\s+(\d+\.\d+(?:\.\d+)?)\s*$", text, re.MULTILINE)
    return (f">={found.group(1)}", ":go") if found else None


def _package_json(text: str) -> tuple[str, str] | None:
    engines = json.loads(text).get("engines") or {}
    node = engines.get("node") if isinstance(engines, dict) else None
    return (node, ":engines.node") if isinstance(node, str) and node.strip() else None


def _cargo_toml(text: str) -> tuple[str, str] | None:
    data = tomllib.loads(text)
    version = data.get("package", {}).get("rust-version") or data.get("workspace", {}).get("package", {}).get(
        "rust-version"
    )
    return (f">={version}", ":package.rust-version") if isinstance(version, str) else None


def _rust_toolchain(text: str) -> tuple[str, str] | None:
    channel = ""
    if "[toolchain]" in text:
        channel = str(tomllib.loads(text).get("toolchain", {}).get("channel", ""))
    else:
        channel = text.strip().splitlines()[0].strip() if text.strip() else ""
    found = re.fullmatch(r"(\d+\.\d+(?:\.\d+)?)", channel)
    return (f">={found.group(1)}", ":toolchain.channel" if "[toolchain]" in text else "") if found else None


_READERS: dict[str, tuple[tuple[str, Callable[[str], tuple[str, str] | None]], ...]] = {
    "python": (
        (".python-version", _pinned),
        ("pyproject.toml", _pyproject),
        ("setup.cfg", _setup_cfg),
        ("setup.py", _setup_py),
        ("runtime.txt", _pinned),
    ),
    "go": (("go.mod", _go_mod),),
    "javascript": ((".nvmrc", _pinned_node), (".node-version", _pinned_node), ("package.json", _package_json)),
    "rust": (
        ("rust-toolchain.toml", _rust_toolchain),
        ("rust-toolchain", _rust_toolchain),
        ("Cargo.toml", _cargo_toml),
    ),
}


# --- requirement syntaxes -----------------------------------------------------------------------


def _poetry(requires: str) -> str:
    """Poetry's `^3.8` / `~3.8` / `>=3.8,<4` as a PEP 440 specifier."""
    parts = []
    for item in re.split(r"\s*,\s*|\s+", requires.strip()):
        if item.startswith("^"):
            major, *rest = item[1:].split(".")
            parts += [f">={item[1:]}", f"<{int(major) + 1}" if int(major) else f"<0.{int(rest[0]) + 1}"]
        elif item.startswith("~") and not item.startswith("~="):
            numbers = item[1:].split(".")
            upper = f"{numbers[0]}.{int(numbers[1]) + 1}" if len(numbers) > 1 else str(int(numbers[0]) + 1)
            parts += [f">={item[1:]}", f"<{upper}"]
        elif item and item != "*":
            parts.append(item)
    return ",".join(parts)


def _python_spec(requires: str) -> SpecifierSet:
    text = requires.strip()
    if re.fullmatch(r"\d+(\.\d+)*", text):
        text = f"=={text}.*" if text.count(".") < 2 else f"=={text}"
    if text.startswith(("^", "~")) and not text.startswith("~="):
        text = _poetry(text)
    return SpecifierSet(text.replace(" ", ""))


def _triple(version: str) -> tuple[int, int, int]:
    numbers = [int(part) for part in re.findall(r"\d+", version)[:3]]
    if not numbers:
        raise ValueError(f"no version in {version!r}")
    return (numbers[0], ([*numbers, 0])[1], ([*numbers, 0, 0])[2])


def _semver_range(requires: str, version: tuple[int, int, int]) -> bool:
    """Node's semver ranges: `||` alternatives of space-separated comparators (>=, >, <, <=, =),
    carets, tildes, x-ranges (`18.x`, `18`, `*`) and hyphen ranges (`16 - 18`)."""
    for alternative in requires.split("||"):
        text = alternative.strip()
        hyphen = re.fullmatch(r"(\S+)\s+-\s+(\S+)", text)
        if hyphen:
            low, high = hyphen.groups()
            if _triple(low) <= version and _within(version, high):
                return True
            continue
        comparators = re.findall(r"(>=|<=|>|<|=|\^|~)?\s*v?([\dxX*]+(?:\.[\dxX*]+){0,2})", text)
        if not comparators and text not in ("", "*", "latest"):
            raise ValueError(f"no range in {text!r}")
        if all(_comparator(op, number, version) for op, number in comparators):
            return True
    return False


def _within(version: tuple[int, int, int], bound: str) -> bool:
    """version <= bound, where a partial bound (18, 18.2) covers all of its versions."""
    numbers = [int(part) for part in bound.split(".") if part.isdigit()]
    return list(version[: len(numbers)]) <= numbers


def _comparator(op: str, number: str, version: tuple[int, int, int]) -> bool:
    parts = [part for part in number.split(".") if part not in ("x", "X", "*")]
    numbers = [int(part) for part in parts]
    base = tuple([*numbers, 0, 0, 0][:3])
    if op == ">=":
        return version >= base
    if op == ">":
        return version > base if len(numbers) == 3 else list(version[: len(numbers)]) > numbers
    if op == "<":
        return version < base
    if op == "<=":
        return version <= base if len(numbers) == 3 else list(version[: len(numbers)]) <= numbers
    if op == "^":
        first = next((i for i, n in enumerate(numbers) if n), len(numbers) - 1 if numbers else 0)
        return version >= base and list(version[: first + 1]) == numbers[: first + 1]
    if op == "~":
        keep = 2 if len(numbers) >= 2 else 1
        return version >= base and list(version[:keep]) == numbers[:keep]
    return list(version[: len(numbers)]) == numbers  # =, or a bare (partial) version
