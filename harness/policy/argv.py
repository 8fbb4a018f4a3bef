"""What a tool call asks for, parsed safely: workspace paths in canonical form, and command lines
as argv (never given to a shell), with every way of starting a program the allowlist cannot see
refused (`Rejected`). Pure string work: the gate decides on what comes out of here."""

from __future__ import annotations

import posixpath
import shlex
import unicodedata

ROOT = "/workspace"

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


_INVISIBLE_CATEGORIES = {"Cf", "Zl", "Zp", "Cs", "Co", "Cn"}
_BLANK_LETTERS = {0x115F, 0x1160, 0x3164, 0xFFA0, 0x2800, 0x034F, 0x17B4, 0x17B5}
"""Characters that render as nothing although their category says otherwise (Hangul fillers,
braille blank, the combining grapheme joiner, Khmer inherent vowels)."""


def invisible(ch: str) -> bool:
    """A character a reader cannot see: format (bidi controls, zero-width), separators other than
    the plain space, private or unassigned code points, variation selectors, blank letters."""
    point = ord(ch)
    category = unicodedata.category(ch)
    return (
        category in _INVISIBLE_CATEGORIES
        or (category == "Zs" and ch != " ")
        or point in _BLANK_LETTERS
        or 0xFE00 <= point <= 0xFE0F
        or 0x180B <= point <= 0x180F
        or 0xE0100 <= point <= 0xE01EF
    )


def normalize_path(path: str) -> str:
    """The path relative to /workspace in canonical posix form ('.' for the root), or Rejected."""
    if "\x00" in path:
        raise Rejected("path contains a NUL byte")
    if any(unicodedata.category(ch) == "Cc" for ch in path):
        raise Rejected("path contains control characters")
    hidden = next((ch for ch in path if invisible(ch)), None)
    if hidden is not None:
        name = unicodedata.name(hidden, "unnamed")
        raise Rejected(
            f"path contains an invisible character ({name}, U+{ord(hidden):04X}): it would make the diff a person "
            "reviews show a name other than the real one; use visible characters only"
        )
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


def program_of(command: str) -> str:
    """The program a (syntax-checked) command line actually starts, after unwrapping timeout/nice."""
    return effective_argv(parse_command(command))[0]
