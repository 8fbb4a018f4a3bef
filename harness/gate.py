"""The permission gate: a pure policy of ordered rules, first match wins, default deny.

The gate sees only what a tool call asks for (tool name, tier, path arguments, parsed argv) and
returns a typed `Decision`. It never touches the filesystem: paths are judged as strings relative to
/workspace, and the runner inside the container re-checks the resolved (symlink-followed) path.

Commands are never given to a shell: `run_command` executes the shlex-parsed argv directly. So an
unquoted shell operator (`|`, `;`, `&&`, `>`, ...) is denied with a clear reason instead of being
passed on as a literal argument, and `$VAR`/`$(...)` are never expanded.
"""

from __future__ import annotations

import fnmatch
import posixpath
import shlex
import unicodedata
from collections.abc import Callable
from typing import Literal

import pathspec
from pydantic import BaseModel, ConfigDict, Field

Action = Literal["allow", "deny", "ask"]
Tier = Literal["read", "write", "exec"]
ROOT = "/workspace"


class Decision(BaseModel):
    """What the gate decided for one call, and which rule decided it (logged with the step)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    action: Action
    rule: str
    reason: str


class GateRequest(BaseModel):
    """What one tool call asks for, as the gate sees it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tool: str
    tier: Tier
    """read: never changes anything; write: changes files; exec: runs a program."""
    paths: tuple[str, ...] = ()
    """Every path argument as the model wrote it."""
    command: str | None = None
    """The model's command line (exec tools that take one); None for fixed commands."""


class Rule(BaseModel):
    """A project rule; evaluated after the built-in safety rules, in order, first match wins."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    """Shown in decisions and logs."""
    action: Action
    """What to decide when the rule matches."""
    tools: list[str] = Field(default_factory=lambda: ["*"])
    """Tool-name globs the rule applies to."""
    paths: list[str] = Field(default_factory=list)
    """Gitignore-style patterns; when set, some path argument must match."""
    programs: list[str] = Field(default_factory=list)
    """Program names; when set, the command's program (after unwrapping) must be one of them."""


class GateConfig(BaseModel):
    """Policy of the permission gate for one session."""

    model_config = ConfigDict(extra="forbid")

    rules: list[Rule] = Field(default_factory=list)
    """Project rules, checked after the built-in safety rules and before the tier rules."""
    read_only_paths: list[str] = Field(default_factory=lambda: ["tests/"])
    """Gitignore-style patterns no tool may write (also mounted read-only into the container)."""
    protected_paths: list[str] = Field(default_factory=lambda: [".git/", ".harness/"])
    """Patterns no tool may read or write."""
    allowed_programs: list[str] = Field(default_factory=lambda: list(DEFAULT_PROGRAMS))
    """Programs run_command may start (bare names, checked on the parsed argv)."""
    write_programs: list[str] = Field(default_factory=lambda: ["mkdir", "touch", "cp", "mv", "rm"])
    """Programs allowed only when writes are allowed."""
    ask_programs: list[str] = Field(default_factory=list)
    """Programs that need a person's approval each time."""
    allow_writes: bool = True
    """Whether write tools (apply_patch, write_file) may run at all."""


DEFAULT_PROGRAMS: tuple[str, ...] = (
    "python",
    "python3",
    "pytest",
    "ls",
    "cat",
    "head",
    "tail",
    "wc",
    "grep",
    "rg",
    "find",
    "sort",
    "uniq",
    "diff",
    "cmp",
    "echo",
    "pwd",
    "true",
    "false",
    "test",
    "stat",
    "file",
    "du",
    "tree",
    "basename",
    "dirname",
    "realpath",
    "cut",
    "tr",
    "git",
)
SHELLS = {"sh", "bash", "dash", "zsh", "ksh", "mksh", "fish", "csh", "tcsh", "busybox", "pwsh"}
LAUNCHERS = {
    "env",
    "xargs",
    "sudo",
    "su",
    "doas",
    "stdbuf",
    "command",
    "exec",
    "nohup",
    "setsid",
    "chroot",
    "unshare",
    "nsenter",
    "strace",
    "ltrace",
    "watch",
    "parallel",
    "script",
    "flock",
    "ionice",
    "chrt",
    "taskset",
    "time",
    "eval",
    "builtin",
    "runuser",
    "gdb",
}
GIT_READ = {"status", "diff", "log", "show", "ls-files", "grep", "blame"}
GIT_BAD_ARGS = ("--output", "--ext-diff", "-O", "--open-files-in-pager", "--exec", "--upload-pack")
FIND_ACTIONS = {"-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf", "-fls"}
OPERATORS = set(";&|<>()")


class Rejected(ValueError):
    """A path or command that no rule may allow; the message is the reason."""


def normalize_path(path: str) -> str:
    """The path relative to /workspace in canonical posix form ('.' for the root), or Rejected."""
    if "\x00" in path:
        raise Rejected("path contains a NUL byte")
    if any(unicodedata.category(ch) == "Cc" for ch in path):
        raise Rejected("path contains control characters")
    if unicodedata.normalize("NFKC", path) != path:
        raise Rejected("path contains unicode look-alike characters (not NFKC-normal)")
    if not path.strip():
        raise Rejected("path is empty")
    joined = posixpath.normpath(posixpath.join(ROOT, path))
    if joined != ROOT and not joined.startswith(ROOT + "/"):
        raise Rejected(f"path {path!r} resolves outside /workspace")
    return posixpath.relpath(joined, ROOT)


def parse_command(command: str) -> list[str]:
    """The argv of a command line; Rejected for shell syntax, which is never interpreted."""
    lexer = shlex.shlex(command, posix=False, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
        argv = shlex.split(command)
    except ValueError as error:
        raise Rejected(f"command cannot be parsed ({error})") from None
    if any(tok and set(tok) <= OPERATORS for tok in tokens):
        raise Rejected(
            "shell operators (|, ;, &&, ||, >, <, &, parentheses) are not supported: commands run "
            "without a shell, one program per call"
        )
    if not argv:
        raise Rejected("command is empty")
    return argv


def effective_argv(argv: list[str]) -> list[str]:
    """Unwrap `timeout`/`nice` and reject every way of starting a program the allowlist cannot see."""
    prog = argv[0]
    if "=" in prog and not prog.startswith("="):
        raise Rejected("environment assignments are not allowed: the environment is fixed by the harness")
    if "/" in prog:
        raise Rejected(f"call programs by their bare name, not a path ({prog!r})")
    if prog in SHELLS:
        raise Rejected(f"shell interpreters ({prog}) are not allowed: pass the program and its arguments directly")
    if prog in LAUNCHERS:
        raise Rejected(f"{prog} starts other programs or changes the environment and is not allowed")
    if prog in {"timeout", "nice"}:
        return effective_argv(_unwrap(argv))
    if prog == "find" and FIND_ACTIONS.intersection(argv[1:]):
        raise Rejected("find with -exec/-ok/-delete/-fprint actions is not allowed; use find to list only")
    if prog == "rg" and any(a == "--pre" or a.startswith("--pre=") for a in argv[1:]):
        raise Rejected("rg --pre runs a program and is not allowed")
    if prog == "git":
        _check_git(argv)
    return argv


def _unwrap(argv: list[str]) -> list[str]:
    rest, prog = argv[1:], argv[0]
    takes_value = {"timeout": {"-s", "--signal", "-k", "--kill-after"}, "nice": {"-n", "--adjustment"}}[prog]
    while rest and rest[0].startswith("-") and rest[0] != "--":
        rest = rest[2:] if rest[0] in takes_value else rest[1:]
    if rest and rest[0] == "--":
        rest = rest[1:]
    if prog == "timeout":
        rest = rest[1:]  # the duration
    if not rest:
        raise Rejected(f"{prog} needs a program to run")
    return rest


def _check_git(argv: list[str]) -> None:
    args = [a for a in argv[1:] if a != "--no-pager"]
    if not args or args[0].startswith("-"):
        raise Rejected("git options before the subcommand (-c, -C, --git-dir, ...) are not allowed")
    if args[0] not in GIT_READ:
        raise Rejected(f"git {args[0]} is not allowed: only {', '.join(sorted(GIT_READ))}")
    if any(a.startswith(GIT_BAD_ARGS) for a in args[1:]):
        raise Rejected("git options that write files or run programs (--output, --ext-diff, -O) are not allowed")


class Gate:
    """Evaluates the ordered rules for one request. Pure: same config and request, same decision."""

    def __init__(self, config: GateConfig | None = None) -> None:
        self.config = config or GateConfig()
        self._read_only = pathspec.PathSpec.from_lines("gitignore", self.config.read_only_paths)
        self._protected = pathspec.PathSpec.from_lines("gitignore", self.config.protected_paths)
        self.rules: list[tuple[str, Callable[[GateRequest], Decision | None]]] = [
            ("path-syntax", self._path_syntax),
            ("protected-path", self._protected_path),
            ("read-only-path", self._read_only_path),
            ("writes-disabled", self._writes_disabled),
            ("command-syntax", self._command_syntax),
            *[(rule.name, self._project_rule(rule)) for rule in self.config.rules],
            ("read-tier", lambda r: self._when(r.tier == "read", "allow", "read-tier", "read tools are allowed")),
            ("write-tier", lambda r: self._when(r.tier == "write", "allow", "write-tier", "writes are allowed")),
            ("command-allowlist", self._allowlist),
            (
                "fixed-command",
                lambda r: self._when(
                    r.tier == "exec" and r.command is None,
                    "allow",
                    "fixed-command",
                    "runs the session's configured command",
                ),
            ),
        ]

    def check(self, request: GateRequest) -> Decision:
        """First matching rule decides; no match means deny."""
        for _, rule in self.rules:
            decision = rule(request)
            if decision is not None:
                return decision
        return Decision(action="deny", rule="default-deny", reason="no rule allows this call")

    @staticmethod
    def _when(cond: bool, action: Action, rule: str, reason: str) -> Decision | None:
        return Decision(action=action, rule=rule, reason=reason) if cond else None

    def is_read_only(self, rel: str) -> bool:
        """Whether a normalised relative path lies in a read-only area."""
        return _in_area(self._read_only, rel)

    def is_protected(self, rel: str) -> bool:
        """Whether a normalised relative path lies in a protected area."""
        return _in_area(self._protected, rel)

    def _normalized(self, request: GateRequest) -> list[str]:
        return [normalize_path(p) for p in request.paths]

    def _path_syntax(self, request: GateRequest) -> Decision | None:
        try:
            self._normalized(request)
        except Rejected as error:
            return Decision(action="deny", rule="path-syntax", reason=str(error))
        return None

    def _protected_path(self, request: GateRequest) -> Decision | None:
        hit = [p for p in self._normalized(request) if self.is_protected(p)]
        return self._when(bool(hit), "deny", "protected-path", f"{', '.join(hit)} is protected (no tool may access it)")

    def _read_only_path(self, request: GateRequest) -> Decision | None:
        hit = [p for p in self._normalized(request) if self.is_read_only(p)]
        return self._when(
            bool(hit) and request.tier == "write",
            "deny",
            "read-only-path",
            f"{', '.join(hit)} is read-only in this session",
        )

    def _writes_disabled(self, request: GateRequest) -> Decision | None:
        return self._when(
            request.tier == "write" and not self.config.allow_writes,
            "deny",
            "writes-disabled",
            "this session does not allow writes",
        )

    def _command_syntax(self, request: GateRequest) -> Decision | None:
        if request.command is None:
            return None
        try:
            effective_argv(parse_command(request.command))
        except Rejected as error:
            return Decision(action="deny", rule="command-syntax", reason=str(error))
        return None

    def _project_rule(self, rule: Rule) -> Callable[[GateRequest], Decision | None]:
        spec = pathspec.PathSpec.from_lines("gitignore", rule.paths)

        def match(request: GateRequest) -> Decision | None:
            if not any(fnmatch.fnmatchcase(request.tool, pat) for pat in rule.tools):
                return None
            if rule.paths and not any(spec.match_file(p) for p in self._normalized(request)):
                return None
            if rule.programs and (request.command is None or program_of(request.command) not in rule.programs):
                return None
            return Decision(action=rule.action, rule=rule.name, reason=f"project rule {rule.name}")

        return match

    def _allowlist(self, request: GateRequest) -> Decision | None:
        if request.command is None:
            return None
        prog = program_of(request.command)
        writes = prog in self.config.write_programs
        if writes and not self.config.allow_writes:
            return Decision(action="deny", rule="writes-disabled", reason=f"{prog} writes and writes are off")
        if prog in self.config.ask_programs:
            return Decision(action="ask", rule="command-ask", reason=f"{prog} needs approval")
        if writes or prog in self.config.allowed_programs:
            return Decision(action="allow", rule="command-allowlist", reason=f"{prog} is allowed")
        return Decision(
            action="deny",
            rule="command-allowlist",
            reason=f"{prog} is not in the allowed programs ({', '.join(self.config.allowed_programs)})",
        )


def program_of(command: str) -> str:
    """The program a (syntax-checked) command line actually starts, after unwrapping timeout/nice."""
    return effective_argv(parse_command(command))[0]


def _in_area(spec: pathspec.PathSpec, rel: str) -> bool:
    """Whether rel, or a directory above it, matches: as in git, a file cannot be re-included
    (`!tests/conftest.py`) once a directory above it is matched (`tests/`). The in-container runner
    decides the same way (`runner.in_area`; tests/tools/test_read_only_agreement.py holds them equal)."""
    parts = rel.split("/")
    parents = ("/".join(parts[:i]) + "/" for i in range(1, len(parts)))
    return any(spec.match_file(parent) for parent in parents) or spec.match_file(rel) or spec.match_file(rel + "/")
