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
from collections.abc import Callable
from typing import Literal

import pathspec
from pydantic import BaseModel, ConfigDict, Field

from harness.policy.argv import Rejected, effective_argv, normalize_path, parse_command, program_of
from harness.policy.decision import Action, Decision

__all__ = [
    "Decision",
    "Gate",
    "GateConfig",
    "GateRequest",
    "Rejected",
    "Rule",
    "Tier",
    "normalize_path",
    "parse_command",
]

Tier = Literal["read", "write", "exec"]


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


GENERATED_PATHS = (
    "*_pb2.py", "*_pb2_grpc.py", "*_pb2.pyi", "*.pb.go", "*.pb.cc", "*.pb.h", "*.min.js", "*.min.css",
    "*.generated.*", "*.g.dart", "*.designer.cs", "package-lock.json", "yarn.lock", "poetry.lock", "Cargo.lock",
)  # fmt: skip


class GateConfig(BaseModel):
    """Policy of the permission gate for one session."""

    model_config = ConfigDict(extra="forbid")

    rules: list[Rule] = Field(default_factory=list)
    """Project rules, checked after the built-in safety rules and before the tier rules."""
    read_only_paths: list[str] = Field(default_factory=lambda: ["tests/"])
    """Gitignore-style patterns no tool may write (also mounted read-only into the container)."""
    protected_paths: list[str] = Field(default_factory=lambda: [".git/", ".harness/"])
    """Patterns no tool may read or write."""
    generated_paths: list[str] = Field(default_factory=lambda: list(GENERATED_PATHS))
    """Files apply_patch and write_file refuse as generated (besides any whose first lines say
    "generated ... do not edit"); the refusal points at their source when it can be found."""
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


def _in_area(spec: pathspec.PathSpec, rel: str) -> bool:
    """Whether rel, or a directory above it, matches: as in git, a file cannot be re-included
    (`!tests/conftest.py`) once a directory above it is matched (`tests/`). The in-container runner
    decides the same way (`pathguard.in_area`, in the container; tests/tools/test_read_only_agreement.py holds them equal)."""
    parts = rel.split("/")
    parents = ("/".join(parts[:i]) + "/" for i in range(1, len(parts)))
    return any(spec.match_file(parent) for parent in parents) or spec.match_file(rel) or spec.match_file(rel + "/")
