"""Unified diffs, parsed and applied to text (stdlib only, no filesystem: the runner does the I/O).

Runs inside the container too (mounted beside runner.py, imported only by apply_patch). Accepts
plain `--- a/f` / `+++ b/f` diffs and git's extended headers: `new file mode`, `deleted file mode`,
`rename from/to`, `copy from/to`, `--- /dev/null` (create) and `+++ /dev/null` (delete), quoted
paths, and `\\ No newline at end of file`. A hunk must match the text exactly (its start line only
chooses between several exact matches), so a stale diff fails instead of landing in the wrong place.
"""

from __future__ import annotations  # runs in the container's python, 3.8 or newer

import re

DEV_NULL = "/dev/null"
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_GIT = re.compile(r'^diff --git ("(?:[^"\\]|\\.)*"|\S+) ("(?:[^"\\]|\\.)*"|\S+)\s*$')
_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


class DiffError(Exception):
    """A diff that cannot be applied; kind is a registry error kind, text says what to do next."""

    def __init__(self, kind: str, text: str) -> None:
        super().__init__(text)
        self.kind, self.text = kind, text


class Hunk:
    __slots__ = ("new", "new_eof_newline", "old", "old_eof_newline", "start")

    def __init__(self, start: int) -> None:
        self.start = start
        self.old: list[str] = []
        self.new: list[str] = []
        self.old_eof_newline: bool | None = None  # False after a `\ No newline` marker
        self.new_eof_newline: bool | None = None


class FilePatch:
    """One file's section: old/new are workspace paths, None for /dev/null (create / delete)."""

    __slots__ = ("copy", "headers_done", "hunks", "mode", "new", "old")

    def __init__(self, old: str | None, new: str | None) -> None:
        self.old, self.new, self.copy, self.headers_done = old, new, False, False
        self.hunks: list[Hunk] = []
        self.mode: str | None = None

    @property
    def action(self) -> str:
        if self.old is None:
            return "create"
        if self.new is None:
            return "delete"
        if self.old != self.new:
            return "copy" if self.copy else "rename"
        return "modify"


def unquote(name: str) -> str:
    """A path as git prints it: optionally C-quoted (octal escapes are UTF-8 bytes), `a/`/`b/` prefix."""
    name = name.split("\t")[0].strip() if not name.startswith('"') else name.strip()
    if name.startswith('"') and name.endswith('"') and len(name) >= 2:
        raw, body, i = bytearray(), name[1:-1], 0
        while i < len(body):
            if body[i] == "\\" and i + 1 < len(body):
                octal = body[i + 1 : i + 4]
                if len(octal) == 3 and all(c in "01234567" for c in octal):
                    raw.append(int(octal, 8))
                    i += 4
                    continue
                raw.append(_ESCAPES.get(body[i + 1], ord(body[i + 1])))
                i += 2
                continue
            raw.extend(body[i].encode("utf-8"))
            i += 1
        name = raw.decode("utf-8", "replace")
    return name[2:] if name[:2] in ("a/", "b/") else name


def _path(name: str) -> str | None:
    path = unquote(name)
    return None if path == DEV_NULL else path


def parse(diff: str) -> list:
    """The file sections of a diff, in order; DiffError when there is nothing to apply."""
    files, lines, i = [], diff.split("\n"), 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("diff --git "):
            files.append(FilePatch(*_git_paths(line)))
        elif line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            old, new = _path(line[4:]), _path(lines[i + 1][4:])
            if files and not files[-1].headers_done and not files[-1].hunks:
                files[-1].old, files[-1].new, files[-1].headers_done = old, new, True
            else:
                files.append(FilePatch(old, new))
                files[-1].headers_done = True
            i += 1
        elif files and not files[-1].headers_done and _extended(files[-1], line):
            pass
        elif _HUNK.match(line) and files:
            files[-1].headers_done = True
            i = _hunk(files[-1], lines, i)
            continue
        i += 1
    if not files or not all(f.hunks or f.mode or f.action != "modify" for f in files):
        raise DiffError(
            "invalid_arguments",
            "diff has a file without `--- a/path` / `+++ b/path` headers and @@ "
            "hunks. Send a unified diff, or use old_text/new_text instead.",
        )
    for f in files:
        if f.old is None and f.new is None:
            raise DiffError(
                "invalid_arguments",
                "a `diff --git` section names no path apply_patch can read. "
                "Add `--- a/path` and `+++ b/path` lines to it.",
            )
        if f.mode not in (None, "100644", "100755"):
            raise DiffError(
                "invalid_arguments",
                f"{f.new or f.old}: mode {f.mode} (a symlink or submodule) is not supported. Edit regular files only.",
            )
    return files


def _git_paths(line: str) -> tuple:
    """(old, new) from a `diff --git` line; (None, None) when its paths are ambiguous (spaces)."""
    git = _GIT.match(line)
    if git:
        return _path(git.group(1)), _path(git.group(2))
    rest = line[len("diff --git ") :]
    half = len(rest) // 2
    if (
        len(rest) % 2
        and rest[half] == " "
        and rest[:2] == "a/"
        and rest[half + 1 : half + 3] == "b/"
        and rest[2:half] == rest[half + 3 :]
    ):
        return rest[2:half], rest[2:half]
    return None, None


def _extended(patch: FilePatch, line: str) -> bool:
    """Apply one git extended header line to patch; False when line is not one."""
    key, _, value = line.partition(" ")
    if line.startswith(("new file mode ", "deleted file mode ")):
        patch.mode = line.rsplit(" ", 1)[1]
        patch.old, patch.new = (None, patch.new) if key == "new" else (patch.old, None)
    elif line.startswith(("rename from ", "copy from ")):
        patch.old, patch.copy = unquote(line.split(" ", 2)[2]), key == "copy"
    elif line.startswith(("rename to ", "copy to ")):
        patch.new = unquote(line.split(" ", 2)[2])
    elif line.startswith("new mode "):
        patch.mode = value.rsplit(" ", 1)[-1]
    elif not line.startswith(("old mode ", "similarity index ", "dissimilarity index ", "index ")):
        return False
    return True


def _hunk(patch: FilePatch, lines: list, i: int) -> int:
    """Read the hunk whose @@ line is lines[i]; the index after it."""
    match = _HUNK.match(lines[i])
    if match is None:
        raise DiffError("invalid_arguments", f"not a hunk header: {lines[i][:80]!r}. Send a unified diff.")
    old_len = 0 if match.group(2) == "0" else int(match.group(2) or 1)
    new_len = 0 if match.group(4) == "0" else int(match.group(4) or 1)
    hunk, last, i = Hunk(int(match.group(1))), " ", i + 1
    while i < len(lines) and (old_len > 0 or new_len > 0 or lines[i].startswith("\\")):
        tag, text = (lines[i][:1] or " "), lines[i][1:]
        if tag == "\\":  # `\ No newline at end of file` is about the line before it
            if last in " -":
                hunk.old_eof_newline = False
            if last in " +":
                hunk.new_eof_newline = False
        elif tag in " +-":
            if tag in " -":
                hunk.old.append(text)
                old_len -= 1
            if tag in " +":
                hunk.new.append(text)
                new_len -= 1
            last = tag
        else:
            break
        i += 1
    patch.hunks.append(hunk)
    return i


def apply(patch: FilePatch, text: str, name: str) -> str:
    """The new text of one file section applied to its old text ('' for a created file)."""
    crlf = "\r\n" in text and text.count("\r\n") == text.count("\n")
    text = text.replace("\r\n", "\n") if crlf else text
    newline, lines = text.endswith("\n") or not text, text.split("\n")
    if text.endswith("\n") or not text:
        lines.pop()
    pos = 0
    for number, hunk in enumerate(patch.hunks, 1):
        old, size = hunk.old, len(hunk.old)
        hits = [k for k in range(pos, len(lines) - size + 1) if lines[k : k + size] == old]
        if not hits:
            raise DiffError(
                "execution_error",
                f"hunk {number} of {name} does not match the file. Re-read the file "
                "with read_file and regenerate the diff against its current text.",
            )
        want = hunk.start if not old else hunk.start - 1  # `@@ -5,0` inserts after line 5
        at = want if want in hits else (hits[0] if len(hits) == 1 else None)
        if at is None:
            raise DiffError(
                "execution_error",
                f"hunk {number} of {name} matches {len(hits)} places. "
                "Add more context lines so each hunk matches exactly once.",
            )
        lines[at : at + size] = hunk.new
        pos = at + len(hunk.new)
        if hunk.new_eof_newline is False:
            newline = False
        elif hunk.old_eof_newline is False:
            newline = True
    out = "\n".join(lines) + ("\n" if newline and lines else "")
    return out.replace("\n", "\r\n") if crlf else out


def paths(diff: str) -> list[str]:
    """Every workspace path a diff reads, writes or removes (what the gate checks)."""
    return [p for f in parse(diff) for p in dict.fromkeys((f.old, f.new)) if p is not None]
