"""A repository's Dockerfile read as hostile input before the engine builds it.

The engine does some of a build's work itself, in this machine's network and with its registries,
whatever network the build's RUN steps get: it fetches an `ADD` source that is a URL (a loopback
service, the metadata address, the internal network: a request from this machine nobody allowed),
and it pulls an image a `FROM` or a `COPY --from` names when it does not have it. So before a build:
the instructions are read as the builder reads them (parser directives, the escape character, line
continuations, comments; build arguments: the file's `ARG` defaults, then the values given, and the
global ones only in `FROM` lines), and
- every image a `FROM` or a `COPY --from` names is listed after its variables are substituted (one
  whose name still holds a variable nobody gave is refused: it could name any registry);
- an `ADD` of a URL or a git address, and a `RUN` flag that reaches past the build's own sandbox
  (`--network`, `--mount`, `--security`), are refused, each in one line with the fix.
Callers then make sure each listed image is on the engine (or pulled from a registry the user
allows) before the build starts, so the engine never pulls on its own.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field

_DIRECTIVE = re.compile(r"#\s*([A-Za-z]+)\s*=\s*(\S+)\s*$")
_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?::?([-+])([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")
_URL = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]*://|git@)")
REACHING_RUN_FLAGS = ("--network", "--mount", "--security")


class DockerfileRefused(ValueError):
    """A Dockerfile that asks the engine for something a build must not do (the message says what)."""


@dataclass
class Read:
    """What a Dockerfile asks of the engine beyond its context."""

    bases: list[str] = field(default_factory=list)
    """Images the `FROM` lines name (build stages and `scratch` left out), in order, substituted."""
    copied_from: list[str] = field(default_factory=list)
    """Images `COPY --from` names (not a stage's name or index), substituted."""

    @property
    def images(self) -> list[str]:
        return list(dict.fromkeys([*self.bases, *self.copied_from]))


def instructions(text: str) -> list[tuple[int, str, str]]:
    """(line number, keyword in upper case, the rest) of each instruction, continuations joined."""
    lines = text.splitlines()
    escape = "\\"
    body = 0
    for number, line in enumerate(lines):  # parser directives: only before anything else
        found = _DIRECTIVE.match(line.strip())
        if not found:
            break
        if found.group(1).lower() == "escape" and found.group(2) in ("\\", "`"):
            escape = found.group(2)
        body = number + 1
    found_instructions: list[tuple[int, str, str]] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(lines[body:], start=body + 1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):  # a comment inside a continuation is left out
            continue
        if not pending:
            start = number
        if raw.rstrip().endswith(escape):
            pending.append(raw.rstrip()[: -len(escape)])
            continue
        pending.append(raw)
        joined = " ".join(part.strip() for part in pending)
        pending = []
        keyword, _, rest = joined.partition(" ")
        found_instructions.append((start, keyword.upper(), rest.strip()))
    if pending:
        joined = " ".join(part.strip() for part in pending)
        keyword, _, rest = joined.partition(" ")
        found_instructions.append((start, keyword.upper(), rest.strip()))
    return found_instructions


def read(text: str, build_args: dict[str, str] | None = None, *, what: str = "the Dockerfile") -> Read:
    """What text asks of the engine (see the module); DockerfileRefused naming the line otherwise."""
    given = dict(build_args or {})
    found = Read()
    global_args: dict[str, str | None] = {}
    stage_args: dict[str, str | None] = {}
    stages: list[str] = []
    in_stage = False
    for number, keyword, rest in instructions(text):
        where = f"{what} line {number}"
        if keyword == "ARG":
            declared = _declared(rest)
            target = stage_args if in_stage else global_args
            for name, default in declared.items():
                if name in given:
                    target[name] = given[name]
                elif in_stage and default is None and name in global_args:
                    target[name] = global_args[name]  # re-declared in a stage: the global value
                else:
                    target[name] = _substitute(default, {**global_args, **stage_args}) if default else default
            continue
        if keyword == "FROM":
            in_stage, stage_args = True, {}
            words = [word for word in rest.split() if not word.startswith("--")]
            if not words:
                continue
            image = _resolved(words[0], global_args, where, "FROM")
            if len(words) >= 3 and words[1].lower() == "as":
                stages.append(words[2].lower())
            else:
                stages.append("")
            if image.lower() != "scratch" and image.lower() not in stages[:-1] and image not in found.bases:
                found.bases.append(image)
            continue
        variables = {**global_args, **stage_args} if not in_stage else dict(stage_args)
        if keyword in ("ADD", "COPY"):
            flags, sources = _flags_and_sources(rest)
            source_from = flags.get("--from")
            if source_from is not None:
                image = _resolved(source_from, variables, where, f"{keyword} --from")
                named = image.lower() in stages or (image.isdigit() and int(image) < len(stages))
                if not named and image not in found.copied_from:
                    found.copied_from.append(image)
            if keyword == "ADD":
                for source in sources:
                    if _URL.match(_substitute(source, variables)):
                        raise DockerfileRefused(
                            f"{where}: ADD {source[:120]!r} is fetched by the engine itself, in this machine's "
                            "network, whatever network the build has: put the file in the repository, or fetch "
                            "it in a RUN step (it gets network only with --setup-network)"
                        )
        elif keyword == "RUN":
            for word in rest.split():
                if not word.startswith("--"):
                    break
                if word.split("=", 1)[0].lower() in REACHING_RUN_FLAGS:
                    raise DockerfileRefused(
                        f"{where}: RUN {word[:80]} reaches past the build's sandbox (a network, a mount of "
                        "another image or of this machine's, a security mode): harness does not build it"
                    )
        elif keyword == "ONBUILD":
            follows = rest.split(None, 1)
            if follows and follows[0].upper() in ("ADD", "COPY", "RUN"):
                read(f"{follows[0]} {follows[1] if len(follows) > 1 else ''}", given, what=f"{where} ONBUILD")
    return found


def onbuild_refusals(triggers: list[str], what: str) -> Read:
    """An image's ONBUILD triggers (its config's `OnBuild`), which a build over it runs: read as its
    own instructions (DockerfileRefused as for a Dockerfile)."""
    return read("\n".join(triggers), what=f"{what}'s ONBUILD")


def _declared(rest: str) -> dict[str, str | None]:
    """ARG NAME[=default] ... (several in one line are allowed)."""
    declared: dict[str, str | None] = {}
    try:
        words = shlex.split(rest, posix=True)
    except ValueError:
        words = rest.split()
    for word in words:
        name, equals, default = word.partition("=")
        declared[name] = default if equals else None
    return declared


def _flags_and_sources(rest: str) -> tuple[dict[str, str], list[str]]:
    """The `--flag=value` words, then the sources (all words but the last; JSON or plain form)."""
    flags: dict[str, str] = {}
    words = rest.split()
    while words and words[0].startswith("--"):
        name, _, value = words.pop(0).partition("=")
        flags[name.lower()] = value
    remainder = " ".join(words)
    if remainder.startswith("["):
        try:
            items = json.loads(remainder)
            if isinstance(items, list) and all(isinstance(item, str) for item in items):
                return flags, items[:-1]
        except ValueError:
            pass
    return flags, words[:-1]


def _resolved(value: str, variables: dict[str, str | None], where: str, what: str) -> str:
    """value with its variables substituted; DockerfileRefused when one is left nobody gave."""
    substituted = _substitute(value, variables)
    if "$" in substituted or not substituted:
        raise DockerfileRefused(
            f"{where}: {what} {value[:120]!r} names its image through a variable no ARG default or build "
            "argument gives: it could name any registry; give the image's name"
        )
    return substituted


def _substitute(value: str, variables: dict[str, str | None]) -> str:
    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(4)
        current = variables.get(name)
        modifier, word = match.group(2), match.group(3) or ""
        if modifier == "-":
            return current if current else _substitute(word, variables)
        if modifier == "+":
            return _substitute(word, variables) if current else ""
        return current if current is not None else match.group(0)

    return _VARIABLE.sub(one, value)
