"""A mined task's setup: what its start state declares for its language (a Python package and its
requirement files, a Node project's lockfile, a Go module's requirements; `harness.environment.detect`),
run in the networked setup phase through the egress allowlist (the language's registry preset plus
the hosts the user adds), bounded by the setup timeout, and cached by content (tasks whose dependency
files are the same share one setup image). `tasks mine` writes it into each task; `tasks check` can
give it to tasks that have none, or change it, with the same flags."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.environment.detect import AUTO, REQUIREMENTS, detect_setup, manifest

REGISTRIES = {"python": "pypi", "javascript": "npm", "go": "go", "rust": "crates"}
"""The `--allow-net` preset each language's setup reaches."""
NONE = "none"
"""`--setup none`: no setup (tasks run on the image as it is)."""
DEVCONTAINER = "devcontainer"
"""A task's setup word for its start state's devcontainer.json (harness.environment.devcontainer): the image it
describes and its commands. `auto` chooses it for a start state that has one."""


@dataclass(frozen=True)
class SetupPolicy:
    """What the flags ask of the tasks' setup."""

    commands: list[str] = field(default_factory=lambda: [AUTO])
    """`auto` (what the start state declares), `none`, or the commands themselves."""
    allow_net: list[str] = field(default_factory=list)
    """Hosts a setup may reach besides its registry (the registry's address behind split DNS)."""
    ca_bundle: Path | None = None
    """A CA bundle the setup (and the calls) trust: an intercepting proxy's."""
    timeout_s: float | None = None
    """All setup commands of a task together (default: the settings' own, 900 s)."""

    @property
    def off(self) -> bool:
        return self.commands == [NONE]


RUNNER_PINS = r"(pytest[[:alnum:]_.-]*|py|pluggy|nose2?|tox|coverage|flake8[[:alnum:]_.-]*|pylint|mypy|black|isort)"
"""Packages a mined Python task's requirement files may pin that the image's own test runner must
keep: a commit of 2012 pinning pytest 2.2 would replace the image's pytest with one that cannot run
on its interpreter (the tests, not the code, would fail)."""


_RUNNER = re.compile(
    r"^(pytest[\w.-]*|py|pluggy|nose2?|tox|coverage|flake8[\w.-]*|pylint|mypy|black|isort)(?=[<>=!~;\s\[]|$)",
    re.IGNORECASE,
)
"""RUNNER_PINS as Python reads a requirement (the grep form runs in the setup container)."""


def declared(start: Path, language: str) -> list[str]:
    """The commands that install what a task's tests need from its start state: for Python, the
    package only when it declares dependencies or lives under src/ (tests import it from the root
    otherwise), and the requirement files without pins of the test runner and its plumbing; for the
    other languages, what `--setup auto` installs (npm ci / npm install, go mod download, cargo fetch)."""
    if language == "go":  # a module-free library needs nothing (and no network)
        return ["go mod download"] if re.search(r"^\s*require\b", manifest(start, "go.mod") or "", re.MULTILINE) else []
    if language != "python":
        found = detect_setup(start, language)
        return found[0] if found else []
    commands = ["python3 -m pip install -e ."] if _python_package_needs_install(start) else []
    for name in REQUIREMENTS:
        if manifest(start, name) is not None:
            kept = f"/tmp/harness-{name}"
            commands.append(
                f"grep -viE '^[[:space:]]*{RUNNER_PINS}([<>=!~;[:space:]\\[]|$)' {name} > {kept}; "
                f"python3 -m pip install -r {kept}"
            )
    return commands


def _python_package_needs_install(root: Path) -> bool:
    """A package whose tests cannot import it from the repository root as it is: it declares
    dependencies (pyproject's, setup.cfg's or setup.py's install_requires) or lives under src/."""
    pyproject = manifest(root, "pyproject.toml") or ""
    if re.search(r"^dependencies\s*=\s*\[\s*[\"']", pyproject, re.MULTILINE):
        return True
    poetry = re.search(r"^\[tool\.poetry\.dependencies\]\s*$(.*?)^\[", pyproject + "\n[", re.MULTILINE | re.DOTALL)
    if poetry and any(line.split("=")[0].strip() not in ("", "python") for line in poetry.group(1).splitlines()):
        return True
    setup_cfg = manifest(root, "setup.cfg") or ""
    if re.search(r"^install_requires\s*=\s*\S", setup_cfg, re.MULTILINE) or re.search(
        r"^install_requires\s*=\s*\n[ \t]+\S", setup_cfg, re.MULTILINE
    ):
        return True
    if re.search(r"install_requires\s*=\s*\[\s*[\"']", manifest(root, "setup.py") or ""):
        return True
    src = Path(root) / "src"
    return src.is_dir() and not src.is_symlink() and any((src / name / "__init__.py").is_file() for name in _names(src))


def _names(folder: Path) -> list[str]:
    try:
        return sorted(entry.name for entry in folder.iterdir() if entry.is_dir() and not entry.is_symlink())[:50]
    except OSError:
        return []


def added_installs(language: str, added: list[str]) -> list[str]:
    """Commands that install what the reference change adds to the manifests (its tests need it)."""
    if not added:
        return []
    quoted = " ".join(shlex.quote(item) for item in added)
    if language == "javascript":
        return [f"npm install --no-save {quoted}"]
    if language == "python":
        kept = [item for item in added if not _RUNNER.match(item)]
        return [f"python3 -m pip install {' '.join(shlex.quote(item) for item in kept)}"] if kept else []
    return []


def setup_keys(start: Path, language: str, policy: SetupPolicy, added: list[str] | None = None) -> dict[str, Any]:
    """The session keys (flat, as a tasks file spells them) a task of this language and start state
    gets: none when its start state declares nothing to install (or setup is off). added: what its
    reference change adds to the manifests, installed too."""
    if policy.off:
        return {}
    if policy.commands in ([AUTO], [DEVCONTAINER]):
        commands = _expanded(policy.commands[0], start, language) + added_installs(language, added or [])
    else:
        commands = [c for command in policy.commands for c in _expanded(command, start, language)]
    if not commands:
        return {}
    preset = REGISTRIES.get(language)
    keys: dict[str, Any] = {
        "setup": commands,
        "allow_net": list(dict.fromkeys([*([preset] if preset else []), *policy.allow_net])),
    }
    if policy.ca_bundle is not None:
        keys["ca_bundle"] = str(policy.ca_bundle)
    if policy.timeout_s is not None:
        keys["setup_timeout"] = policy.timeout_s
    return keys


def with_network(current: dict[str, Any], policy: SetupPolicy) -> dict[str, Any]:
    """A task's own setup keys with the flags' extra hosts and CA bundle (when it has a setup)."""
    if not current.get("setup"):
        return {}
    keys: dict[str, Any] = {}
    if policy.allow_net:
        keys["allow_net"] = list(dict.fromkeys([*current.get("allow_net", []), *policy.allow_net]))
    if policy.ca_bundle is not None:
        keys["ca_bundle"] = str(policy.ca_bundle)
    if policy.timeout_s is not None:
        keys["setup_timeout"] = policy.timeout_s
    return keys


SETUP_KEYS = ("setup", "allow_net", "ca_bundle", "setup_timeout")
"""The keys a setup policy writes (and, with `--setup none`, takes away)."""


def _expanded(command: str, start: Path, language: str) -> list[str]:
    """A setup word as a task's commands: `auto` and `devcontainer` are the start state's
    devcontainer.json when it has one, else what it declares for its language."""
    from harness.environment.devcontainer import find

    if command not in (AUTO, DEVCONTAINER):
        return [command]
    return [DEVCONTAINER] if find(start) is not None else declared(start, language)


def uses_devcontainer(keys: dict[str, Any]) -> bool:
    """A task's setup keys take its start state's devcontainer.json."""
    return DEVCONTAINER in keys.get("setup", [])
