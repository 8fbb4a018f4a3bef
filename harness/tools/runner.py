"""File tools, executed INSIDE the container (stdlib only; mounted read-only at /opt/harness/runner.py).

Running here means a symlink in the repository resolves inside the container, never on the host.
Request: `runner.main()` with argv `key=value ...` (see `encode_request`; `key[]=v` repeats build a
list, `arg.x` are the tool's arguments), or `--stdin` with the request as JSON on stdin for payloads
too big (or not representable) as argv; `harness.tools.launch` imports it with its host-compiled
.pyc (it also runs as a script). Answer on stdout: line 1 `OK` or `ERROR <kind>`, line 2 the written
paths separated by tabs, then the text for the model; the exit code is the test command's for
run_tests, else 0. The read path imports neither json nor re: python's start-up is most of a
read_file call. Unified diffs are parsed by unified_diff.py, mounted beside this file.

Every path is re-checked after os.path.realpath: it must stay inside root and outside protected /
read-only areas, and files are then opened component by component with O_NOFOLLOW, so a symlink
swapped in after the check is refused, never followed.

One file of ~750 lines on purpose: it is mounted into every tool container as one read-only unit
(with its host-compiled .pyc), so it cannot import harness; it is split by concern inside: pattern
matching, safe path handling, one `op_*` per tool, request encoding.
"""

import errno
import os
import sys

MAX_LINES = 800
MAX_LINE_CHARS = 2000
MAX_ENTRIES = 400
SKIP_DIRS = {
    ".git",
    "node_modules",
    "__pycache__",
    "dist",
    "build",
    ".venv",
    "venv",
    ".tox",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".eggs",
    "target",
    ".next",
    "coverage",
    "htmlcov",
}


class Failure(Exception):
    """A model-visible failure: kind is one of the registry's error kinds."""

    def __init__(self, kind: str, text: str) -> None:
        super().__init__(text)
        self.kind, self.text = kind, text


# --- gitignore-style patterns (enough for .gitignore files and the gate's path lists) ---------


GLOB_CHARS = set("*?[")


def _glob_regex(pat: str) -> str:
    import re

    out, i = [], 0
    while i < len(pat):
        if pat.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pat.startswith("/**", i) and i + 3 == len(pat):
            out.append("/.*")
            i += 3
        elif pat[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pat[i] == "?":
            out.append("[^/]")
            i += 1
        elif pat[i] == "[" and "]" in pat[i + 1 :]:
            end = pat.index("]", i + 1)
            out.append("[" + pat[i + 1 : end].replace("!", "^", 1) + "]")
            i = end + 1
        else:
            out.append(re.escape(pat[i]))
            i += 1
    return "".join(out)


class _Literal:
    """A glob-free pattern, matched without the re module (keeps the read path's start-up lean)."""

    def __init__(self, text: str, anchored: bool) -> None:
        self.text, self.anchored = text, anchored

    def fullmatch(self, rel: str) -> bool:
        return rel == self.text or (not self.anchored and rel.endswith("/" + self.text))


class Patterns:
    """Gitignore-style patterns relative to `base` (a relative dir, '' for root); last match wins."""

    def __init__(self, lines: list, base: str = "") -> None:
        self.base, self.rules = base, []
        for line in lines:
            line = line.rstrip("\n").rstrip()
            if not line or line.startswith("#"):
                continue
            neg = line.startswith("!")
            line = line[1:] if neg else line
            dir_only = line.endswith("/")
            line = line.rstrip("/")
            anchored = "/" in line
            line = line.lstrip("/")
            if GLOB_CHARS.isdisjoint(line) and "\\" not in line:
                regex = _Literal(line, anchored)
            else:
                import re

                body = _glob_regex(line)
                # A compiled pattern answers .match() as _Literal does (re stays unimported on the read path).
                regex = re.compile(body if anchored else "(?:.*/)?" + body)  # type: ignore[assignment]
            self.rules.append((regex, neg, dir_only))

    def match(self, rel: str, is_dir: bool) -> bool | None:
        """True ignored, False re-included, None no opinion."""
        if self.base:
            if not rel.startswith(self.base + "/"):
                return None
            rel = rel[len(self.base) + 1 :]
        verdict = None
        for regex, neg, dir_only in self.rules:
            if (is_dir or not dir_only) and regex.fullmatch(rel):
                verdict = not neg
        return verdict


def in_area(patterns: Patterns, rel: str) -> bool:
    """Whether rel or one of its parent directories matches."""
    parts = rel.split("/")
    return any(patterns.match("/".join(parts[:i]), True) for i in range(1, len(parts))) or bool(
        patterns.match(rel, False) or patterns.match(rel, True)
    )


# --- safe path handling -----------------------------------------------------------------------


class Space:
    """The workspace root plus the areas the harness forbids; resolves and opens paths safely."""

    def __init__(self, req: dict) -> None:
        self.root = os.path.realpath(req.get("root", "/workspace"))
        self.read_only = Patterns(req.get("read_only", []))
        self.protected = Patterns(req.get("protected", []))
        self.generated = Patterns(req.get("generated", []))

    def resolve(self, path: str, write: bool = False) -> str:
        """Relative path after following symlinks inside the container; Failure when it escapes."""
        lexical = os.path.normpath(os.path.join(self.root, path))
        if not (lexical == self.root or lexical.startswith(self.root + "/")):
            raise Failure("denied", f"{path} is outside /workspace")
        real = os.path.realpath(lexical)
        if not (real == self.root or real.startswith(self.root + "/")):
            raise Failure("denied", f"{path} is a symlink (or lies under one) that resolves outside /workspace")
        rel = os.path.relpath(real, self.root)
        rel = "" if rel == "." else rel
        if rel and in_area(self.protected, rel):
            raise Failure("denied", f"{path} resolves to {rel}, which is protected")
        if write and rel and in_area(self.read_only, rel):
            raise Failure("denied", f"{path} resolves to {rel}, which is read-only in this session")
        return rel

    def open_dir(self, rel: str, create: bool = False) -> int:
        """fd of the directory rel, opened one component at a time without following symlinks."""
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        for part in [p for p in rel.split("/") if p]:
            try:
                nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    os.close(fd)
                    raise
                os.mkdir(part, 0o755, dir_fd=fd)
                nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as error:
                os.close(fd)
                if error.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise Failure("denied", f"{rel} changed to a symlink or file while in use; refused") from None
                raise
            os.close(fd)
            fd = nxt
        return fd

    def read_bytes(self, rel: str) -> bytes:
        parent, name = os.path.split(rel)
        dfd = self.open_dir(parent)
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dfd)
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise Failure("denied", f"{rel} changed to a symlink while in use; refused") from None
            raise
        finally:
            os.close(dfd)
        with os.fdopen(fd, "rb") as handle:
            return handle.read()

    def write_bytes(self, rel: str, data: bytes, must_not_exist: bool = False, mode: int | None = None) -> None:
        """Atomic replace (temp + rename) beneath the root; never writes through a symlink.

        The file keeps its permission bits unless mode is given (new files: 0o644)."""
        parent, name = os.path.split(rel)
        dfd = self.open_dir(parent, create=True)
        try:
            try:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                if must_not_exist:
                    raise Failure("execution_error", f"{rel} already exists")
                if not (st.st_mode & 0o170000) == 0o100000:
                    raise Failure("denied", f"{rel} is not a regular file (a symlink or directory); refused")
                kept = st.st_mode & 0o7777
            except FileNotFoundError:
                kept = 0o644
            mode = kept if mode is None else mode
            tmp = f".{name}.harness-{os.getpid()}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode, dir_fd=dfd)
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.chmod(tmp, mode, dir_fd=dfd)
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        finally:
            os.close(dfd)

    def remove(self, rel: str) -> None:
        """Unlink a regular file beneath the root (unlink never follows a symlink swapped in)."""
        parent, name = os.path.split(rel)
        dfd = self.open_dir(parent)
        try:
            if os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode & 0o170000 != 0o100000:
                raise Failure("denied", f"{rel} is not a regular file (a symlink or directory); refused")
            os.unlink(name, dir_fd=dfd)
        finally:
            os.close(dfd)

    def kind_of(self, rel: str) -> str:
        """'file', 'dir', 'missing' or 'other' for a resolved path (no symlinks left in it)."""
        try:
            st = os.stat(os.path.join(self.root, rel), follow_symlinks=False)
        except FileNotFoundError:
            return "missing"
        return {0o100000: "file", 0o040000: "dir"}.get(st.st_mode & 0o170000, "other")


# --- operations -------------------------------------------------------------------------------


def read_text(space: Space, rel: str, path: str) -> str:
    kind = space.kind_of(rel)
    if kind == "missing":
        raise Failure("execution_error", f"{path} does not exist. Use list_dir or search_code to find the right path.")
    if kind == "dir":
        raise Failure("execution_error", f"{path} is a directory. Use list_dir to see its entries.")
    data = space.read_bytes(rel)
    if b"\x00" in data[:8192]:
        raise Failure(
            "execution_error",
            f"{path} is a binary file ({len(data)} bytes); read_file shows text only. "
            "Use run_command with `file` or `stat` to inspect it.",
        )
    return data.decode("utf-8", errors="replace")


def op_read_file(space: Space, args: dict, max_bytes: int) -> dict:
    path = args["path"]
    lines = read_text(space, space.resolve(path), path).split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    total = len(lines)
    start = int(args.get("start_line") or 1)
    if total == 0:
        return {"ok": True, "text": f"OK read_file {path}: empty file (0 lines)"}
    if start > total:
        raise Failure(
            "invalid_arguments",
            f"start_line={start} is past the end of {path} ({total} lines). Use a start_line between 1 and {total}.",
        )
    end = min(int(args.get("end_line") or total), total)
    if end < start:
        raise Failure("invalid_arguments", f"end_line={end} is before start_line={start}. Use end_line >= start_line.")
    if args.get("pattern"):
        return _read_matching(path, lines, start, end, str(args["pattern"]), int(args.get("context") or 0), max_bytes)
    shown: "list[str]" = []
    budget, last = max_bytes, start - 1
    for number in range(start, min(end, start + MAX_LINES - 1) + 1):
        line = lines[number - 1].rstrip("\r")
        if len(line) > MAX_LINE_CHARS:
            line = line[:MAX_LINE_CHARS] + f" [line truncated: {len(line)} chars]"
        entry = f"{number:6}\t{line}"
        budget -= len(entry.encode("utf-8", "replace")) + 1
        if budget < 0 and shown:
            break
        shown.append(entry)
        last = number
    head = f"OK read_file {path}: lines {start}-{last} of {total}"
    body = "\n".join([head, *shown])
    if last < end:
        body += f"\n[TRUNCATED: lines {start}-{last} of {total} shown; continue with start_line={last + 1}]"
    return {"ok": True, "text": body}


def _numbered(number: int, line: str) -> str:
    line = line.rstrip("\r")
    if len(line) > MAX_LINE_CHARS:
        line = line[:MAX_LINE_CHARS] + f" [line truncated: {len(line)} chars]"
    return f"{number:6}\t{line}"


def _read_matching(
    path: str, lines: "list[str]", start: int, end: int, pattern: str, context: int, max_bytes: int
) -> dict:
    """The lines of start..end matching pattern, each with `context` lines around it."""
    import re

    try:
        regex = re.compile(pattern)
    except re.error as error:
        raise Failure("invalid_arguments", f"pattern {pattern!r} is not a valid regular expression: {error}.") from None
    total = len(lines)
    hits = [n for n in range(start, end + 1) if regex.search(lines[n - 1])]
    where = f"lines {start}-{end} of {total}"
    if not hits:
        return {"ok": True, "text": f"OK read_file {path}: no line matches '{pattern}' ({where} searched)"}
    wanted: "list[int]" = []
    for n in hits:
        for m in range(max(start, n - context), min(end, n + context) + 1):
            if not wanted or m > wanted[-1]:
                wanted.append(m)
    shown: "list[str]" = []
    budget, previous, last = max_bytes, None, None
    for count, n in enumerate(wanted):
        entry = _numbered(n, lines[n - 1])
        if previous is not None and n != previous + 1:
            entry = "--\n" + entry
        budget -= len(entry.encode("utf-8", "replace")) + 1
        if (budget < 0 and shown) or count >= MAX_LINES:
            break
        shown.append(entry)
        previous = last = n
    head = f"OK read_file {path}: {len(hits)} line(s) match '{pattern}' ({where} searched)"
    body = "\n".join([head, *shown])
    if last is not None and last < wanted[-1]:
        body += f"\n[TRUNCATED: matches shown up to line {last}; continue with start_line={last + 1}]"
    return {"ok": True, "text": body}


def op_list_dir(space: Space, args: dict, max_bytes: int) -> dict:
    path, depth = args.get("path") or ".", int(args.get("depth") or 2)
    rel = space.resolve(path)
    kind = space.kind_of(rel)
    if kind != "dir":
        what = "does not exist" if kind == "missing" else "is not a directory (use read_file)"
        raise Failure("execution_error", f"{path} {what}. Use list_dir on a parent directory to see what exists.")
    parts = rel.split("/") if rel else []
    ignores = [g for g in (_gitignore(space, "/".join(parts[:i])) for i in range(len(parts))) if g]
    out: list[str] = []
    total = _walk(space, rel, 0, depth, ignores, out)
    text = f"OK list_dir {path} (depth {depth}): {total} entries" + ("\n" + "\n".join(out) if out else "")
    if total > len(out):
        text += f"\n[TRUNCATED: {len(out)} of {total} entries shown; list a subdirectory or use a smaller depth]"
    return {"ok": True, "text": text}


def _gitignore(space: Space, rel: str) -> Patterns | None:
    try:
        data = space.read_bytes(os.path.join(rel, ".gitignore") if rel else ".gitignore")
    except (OSError, Failure):
        return None
    return Patterns(data.decode("utf-8", "replace").splitlines(), rel)


def _walk(space: Space, rel: str, level: int, depth: int, ignores: list, out: list) -> int:
    fd = space.open_dir(rel)
    try:
        entries = sorted(os.scandir(fd), key=lambda e: e.name)
        links = {e.name: os.readlink(e.name, dir_fd=fd) for e in entries if e.is_symlink()}
    finally:
        os.close(fd)
    own = _gitignore(space, rel)
    ignores = [*ignores, own] if own else ignores
    count = 0
    for entry in entries:
        child = f"{rel}/{entry.name}" if rel else entry.name
        is_link = entry.is_symlink()
        is_dir = not is_link and entry.is_dir(follow_symlinks=False)
        if (is_dir and entry.name in SKIP_DIRS) or in_area(space.protected, child):
            continue
        verdicts = [v for v in (p.match(child, is_dir) for p in ignores) if v is not None]
        if verdicts and verdicts[-1]:
            continue
        count += 1
        if len(out) < MAX_ENTRIES:
            suffix = " -> " + links[entry.name] if is_link else ""
            out.append("  " * level + entry.name + ("/" if is_dir else "") + suffix)
        if is_dir and level + 1 < depth:
            count += _walk(space, child, level + 1, depth, ignores, out)
    return count


def _lines_at(content: str, index: int) -> int:
    return content.count("\n", 0, index) + 1


def op_apply_patch(space: Space, args: dict, max_bytes: int) -> dict:
    if args.get("diff"):
        return apply_diff(space, args["diff"])
    path, old, new = args["path"], args.get("old_text") or "", args.get("new_text") or ""
    if not old:
        raise Failure(
            "invalid_arguments",
            "old_text is empty. Copy the exact text to replace, or use write_file to create a file.",
        )
    import re

    rel = space.resolve(path, write=True)
    content = read_text(space, rel, path)
    refuse_generated(space, rel, path)
    if old not in content and "\r\n" in content:
        old, new = old.replace("\n", "\r\n"), new.replace("\n", "\r\n")
    starts = [m.start() for m in re.finditer("(?=" + re.escape(old) + ")", content)]
    if not starts:
        raise Failure(
            "execution_error",
            f"old_text was not found in {path}. Re-read the file with read_file and "
            "copy the exact text, including indentation and blank lines.",
        )
    if len(starts) > 1:
        where = ", ".join(str(_lines_at(content, s)) for s in starts[:10])
        raise Failure(
            "execution_error",
            f"old_text matches {len(starts)} times in {path} (at lines {where}). "
            "Include more surrounding lines in old_text so it matches exactly once.",
        )
    updated = content[: starts[0]] + new + content[starts[0] + len(old) :]
    space.write_bytes(rel, updated.encode("utf-8"))
    first = _lines_at(content, starts[0])
    old_n, new_n = old.rstrip("\r\n").count("\n") + 1, new.rstrip("\r\n").count("\n") + 1 if new else 0
    return {
        "ok": True,
        "wrote": [rel],
        "text": f"OK apply_patch {path}: replaced lines {first}-{first + old_n - 1} with {new_n} line(s)",
    }


GENERATED_HEADER = (
    r"(?i)(\bdo not edit\b|\bcode generated\b|\bautomatically generated\b|\bauto-?generated\b"
    r"|\bgenerated by\b|@generated\b)"
)
GENERATED_SOURCE = r"(?i)(?:\bsource:\s*|generated (?:by \S+ )?from\s+)[`'\"]?([\w./-]+\.\w+)"
_PROTO_OUTPUTS = ("_pb2_grpc.py", "_pb2.py", "_pb2.pyi", ".pb.go", "_grpc.pb.go", ".pb.cc", ".pb.h")


def refuse_generated(space: Space, rel: str, path: str) -> None:
    """Failure when rel is a generated file (by the configured globs, or a "generated, do not edit"
    header in its first lines), pointing at its source when one can be found."""
    import re

    header = ""
    if space.kind_of(rel) == "file":
        try:
            head = space.read_bytes(rel)[:2048].decode("utf-8", "replace")
        except Failure:
            head = ""
        first = head.splitlines()[:5]
        header = next((line.strip() for line in first if re.search(GENERATED_HEADER, line)), "")
    if not header and not in_area(space.generated, rel):
        return
    source = re.search(GENERATED_SOURCE, header) if header else None
    hint = ""
    if source:
        hint = f" Its source is {source.group(1)}: change that (and regenerate) instead."
    else:
        name = os.path.basename(rel)
        stem = next((name[: -len(end)] for end in _PROTO_OUTPUTS if name.endswith(end)), None)
        found = _find_file(space, f"{stem}.proto") if stem else None
        if found:
            hint = f" Its source is {found}: change that (and regenerate) instead."
        elif stem:
            hint = f" Its source is probably {stem}.proto; find it with search_code or list_dir."
        else:
            hint = " Find the file it is generated from (search_code for its name) and change that instead."
    why = f"its header says {header[:120]!r}" if header else "it matches the session's generated-file patterns"
    raise Failure("denied", f"{path} is a generated file ({why}); it is not edited by hand.{hint}")


def _find_file(space: Space, name: str, limit: int = 20000) -> "str | None":
    seen = 0
    for folder, dirs, files in os.walk(space.root):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
        if name in files:
            return os.path.relpath(os.path.join(folder, name), space.root)
        seen += len(files) + len(dirs)
        if seen > limit:
            return None
    return None


def op_write_file(space: Space, args: dict, max_bytes: int) -> dict:
    path, content = args["path"], args.get("content", "")
    rel = space.resolve(path, write=True)
    if not rel:
        raise Failure("invalid_arguments", "path names the workspace root. Give a file path such as src/new.py.")
    kind = space.kind_of(rel)
    if kind == "dir":
        raise Failure("execution_error", f"{path} is a directory. Choose a file path inside it.")
    refuse_generated(space, rel, path)
    if kind != "missing" and args.get("overwrite") not in (True, "1", "true"):
        raise Failure(
            "execution_error",
            f"{path} already exists. Use apply_patch to edit it, or pass overwrite=true to replace the whole file.",
        )
    data = content.encode("utf-8")
    space.write_bytes(rel, data)
    verb = "replaced" if kind != "missing" else "created"
    return {
        "ok": True,
        "wrote": [rel],
        "text": f"OK write_file {path}: {verb}, {len(data)} bytes, "
        f"{content.count(chr(10)) + (0 if content.endswith(chr(10)) or not content else 1)} lines",
    }


# --- unified diffs (parsed and applied to text by unified_diff.py; the file system work is here) ----


def _unified_diff():
    if __package__:  # on the host, as harness.tools.runner
        from . import unified_diff
    else:  # in the container (/opt/harness is first on sys.path) or run as a script
        import unified_diff  # type: ignore[import-not-found,no-redef]
    return unified_diff


def diff_paths(diff: str) -> list[str]:
    """Every path a unified diff reads, writes or removes (for the gate, on the host)."""
    udiff = _unified_diff()
    try:
        return udiff.paths(diff)
    except udiff.DiffError as error:
        raise Failure(error.kind, error.text) from None


def _regular_file(space: Space, path: str, rel: str, what: str) -> None:
    """Refuse to delete or rename anything but a regular file, and never a symlink's target."""
    lexical = os.path.normpath(os.path.join(space.root, path))
    if os.path.islink(lexical):
        raise Failure(
            "denied", f"{path} is a symlink; apply_patch does not {what} symlinks. Name the file it points to."
        )
    kind = space.kind_of(rel)
    if kind != "file":
        raise Failure(
            "execution_error",
            f"{path} {'does not exist' if kind == 'missing' else 'is not a regular file'}"
            f"; the diff cannot {what} it. Use list_dir to check the path.",
        )


class _Change:
    """What one file section of a diff will do, computed before anything is written."""

    __slots__ = ("mode", "new", "remove", "summary", "text", "write")

    def __init__(
        self,
        write: str | None,
        text: str = "",
        mode: int | None = None,
        new: bool = False,
        remove: str | None = None,
        summary: str = "",
    ) -> None:
        self.write, self.text, self.mode, self.new = write, text, mode, new
        self.remove, self.summary = remove, summary


def _plan(space: Space, udiff, patch) -> _Change:
    action, name = patch.action, patch.new or patch.old
    mode = 0o755 if patch.mode == "100755" else 0o644 if patch.mode else None
    if action == "create":
        rel = space.resolve(patch.new, write=True)
        if space.kind_of(rel) != "missing":
            raise Failure(
                "execution_error", f"{patch.new} already exists; the diff creates it. Diff against it instead."
            )
        return _Change(rel, udiff.apply(patch, "", name), mode, True, summary=f"{rel} (created)")
    old_rel = space.resolve(patch.old, write=action != "copy")
    if action != "copy":
        refuse_generated(space, old_rel, patch.old)
    if action in ("delete", "rename"):
        _regular_file(space, patch.old, old_rel, action)
    text = udiff.apply(patch, read_text(space, old_rel, patch.old), name)
    hunks = f"{len(patch.hunks)} hunk(s)"
    if action == "delete":
        if text:
            raise Failure(
                "execution_error",
                f"the diff deletes {patch.old} but does not remove all of its lines. "
                "Re-read the file and list every line as removed.",
            )
        return _Change(None, remove=old_rel, summary=f"{old_rel} (deleted)")
    if action == "modify":
        return _Change(old_rel, text, mode, summary=f"{old_rel} ({hunks})")
    rel = space.resolve(patch.new, write=True)
    if space.kind_of(rel) != "missing":
        raise Failure(
            "execution_error",
            f"{patch.new} already exists; the diff {action}s {patch.old} onto it. "
            "Choose a path that does not exist yet.",
        )
    if mode is None:  # a renamed or copied file keeps its permission bits
        mode = os.stat(os.path.join(space.root, old_rel), follow_symlinks=False).st_mode & 0o777
    return _Change(
        rel, text, mode, True, old_rel if action == "rename" else None, f"{old_rel} -> {rel} ({action}d, {hunks})"
    )


def apply_diff(space: Space, diff: str) -> dict:
    """Check and compute every file first (any failure changes nothing); then write, then remove."""
    udiff = _unified_diff()
    try:
        changes = [_plan(space, udiff, patch) for patch in udiff.parse(diff)]
    except udiff.DiffError as error:
        raise Failure(error.kind, error.text) from None
    touched = [rel for c in changes for rel in (c.write, c.remove) if rel is not None]
    twice = sorted({rel for rel in touched if touched.count(rel) > 1})
    if twice:
        raise Failure(
            "invalid_arguments", f"the diff changes {', '.join(twice)} more than once. Send one section per file."
        )
    for change in changes:
        if change.write is not None:
            space.write_bytes(change.write, change.text.encode("utf-8"), must_not_exist=change.new, mode=change.mode)
    for change in changes:
        if change.remove is not None:
            space.remove(change.remove)
    return {"ok": True, "wrote": touched, "text": "OK apply_patch: " + ", ".join(c.summary for c in changes)}


MAX_MATCHES = 200


def op_search(space: Space, args: dict, max_bytes: int) -> dict:
    """ripgrep below a resolved path; matches as file:line:text, capped with a marker."""
    import subprocess  # imported here: the read path stays lean (python startup dominates a call)

    path = args.get("path") or "."
    rel = space.resolve(path)
    argv = [
        "rg",
        "--line-number",
        "--no-heading",
        "--color=never",
        "--no-require-git",
        "--sort=path",
        "--max-columns=300",
        "--max-columns-preview",
        "--max-count=50",
        "-e",
        args["pattern"],
    ]
    if args.get("glob"):
        argv += ["--glob", args["glob"]]
    proc = subprocess.run(
        [*argv, "--", rel or "."],
        cwd=space.root,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    if proc.returncode == 1:
        return {"ok": True, "text": f"OK search_code: no matches for {args['pattern']!r} in {path}"}
    if proc.returncode != 0:
        why = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise Failure(
            "invalid_arguments",
            f"ripgrep failed: {' '.join(why[-3:])[:400]}. Fix the regex "
            "(Rust regex syntax; escape ( [ { . with a backslash for literals).",
        )
    lines = [ln[2:] if ln.startswith("./") else ln for ln in proc.stdout.decode("utf-8", "replace").splitlines()]
    shown, budget = [], max_bytes
    for line in lines[:MAX_MATCHES]:
        budget -= len(line.encode("utf-8", "replace")) + 1
        if budget < 0:
            break
        shown.append(line)
    text = f"OK search_code {args['pattern']!r} in {path}: {len(lines)} matching lines\n" + "\n".join(shown)
    if len(shown) < len(lines):
        text += f"\n[TRUNCATED: {len(shown)} of {len(lines)} matching lines shown; narrow the pattern, path or glob]"
    return {"ok": True, "text": text}


# --- tests ------------------------------------------------------------------------------------


def op_run_tests(space: Space, args: dict, max_bytes: int) -> dict:
    import re
    import subprocess

    argv, junit = list(args["argv"]), "/tmp/harness-junit.xml"
    is_pytest = any(tok == "pytest" or tok.endswith("/pytest") for a in argv for tok in a.split())
    if is_pytest:
        argv += [
            "-rfE",
            "--tb=line",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--junitxml={junit}",
            "-o",
            "junit_family=xunit1",
        ]
    argv += args.get("selectors") or []
    if os.path.exists(junit):
        os.unlink(junit)
    proc = subprocess.run(
        argv, cwd=space.root, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    output = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", proc.stdout.decode("utf-8", "replace"))  # colour codes
    lines = [line.rsplit("\r", 1)[-1] for line in output.split("\n")]  # a progress bar's last state only
    lines = [line for line in lines if line.strip()]
    summary = next(
        (
            line.strip("= ")
            for line in reversed(lines)
            if re.search(r"\b(passed|failed|errors?|skipped|no tests ran|deselected)\b", line)
        ),
        None,
    )
    if summary is not None:  # the same result reads the same every time: no timing
        summary = re.sub(r"\s+in\s+[\d.]+s(\s*\(\d+:\d\d:\d\d\))?", "", summary)
    failures = _junit_failures(junit, lines, space.root) if is_pytest and os.path.exists(junit) else None
    if failures is None or summary is None:
        tail = lines[-40:]
        text = "\n".join(["test output (last lines):", *tail]) if tail else "(no output)"
    else:
        text = "\n".join([*failures, summary]) if failures else summary
    return {"ok": True, "text": text, "exit_code": proc.returncode}


_TB_LINE = r"^(\S+?\.py):(\d+): (.*)$"


def _junit_failures(path: str, output: list[str], root: str) -> list[str]:
    """One line per failing test: id, assertion location (from --tb=line output), short message."""
    import re
    import xml.etree.ElementTree as ET

    summary_at = next((k for k, line in enumerate(output) if "short test summary info" in line), len(output))
    locations = [m for m in (re.match(_TB_LINE, line) for line in output[:summary_at]) if m]
    cases = [
        (case, bad)
        for case in ET.parse(path).getroot().iter("testcase")
        for bad in [next((c for c in case if c.tag in ("failure", "error")), None)]
        if bad is not None
    ]
    out = []
    for number, (case, bad) in enumerate(cases):
        file = case.get("file") or case.get("classname", "").replace(".", "/") + ".py"
        module, classname = file[:-3].replace("/", "."), case.get("classname", "")
        cls = classname[len(module) + 1 :] if classname.startswith(module + ".") else ""
        node = "::".join(x for x in (file, cls, case.get("name", "")) if x)
        loc = locations[number] if len(locations) == len(cases) else None
        if loc:
            where = f"{os.path.relpath(loc.group(1), root) if loc.group(1).startswith('/') else loc.group(1)}:{loc.group(2)}"
        else:
            where = f"{file}:{int(case.get('line', '-1')) + 1}"
        message = (bad.get("message") or (loc.group(3) if loc else "") or bad.text or "").strip().splitlines()
        label = "ERROR" if bad.tag == "error" else "FAILED"
        out.append(f"{label} {node} at {where}: {(message[0] if message else '')[:300]}")
    return out


OPS = {
    "read_file": op_read_file,
    "list_dir": op_list_dir,
    "apply_patch": op_apply_patch,
    "write_file": op_write_file,
    "run_tests": op_run_tests,
    "search": op_search,
}


def handle(req: dict) -> dict:
    """Run one request; every failure becomes data, never a traceback."""
    try:
        return {
            "ok": True,
            "kind": None,
            "wrote": [],
            **OPS[req["op"]](Space(req), req.get("args", {}), int(req.get("max_bytes", 24000))),
        }
    except Failure as failure:
        return {"ok": False, "kind": failure.kind, "text": failure.text, "wrote": []}
    except (OSError, UnicodeError, SyntaxError) as error:  # xml ParseError is a SyntaxError
        return {"ok": False, "kind": "execution_error", "text": f"{type(error).__name__}: {error}", "wrote": []}


def encode_request(request: dict) -> list:
    """argv items for a request dict (the inverse of decode_request); None and False are left out."""
    items: "list[str]" = []

    def put(key: str, value: object) -> None:
        if value is None or value is False:
            return
        if isinstance(value, (list, tuple)):
            items.extend(f"{key}[]={item}" for item in value)
        else:
            items.append(f"{key}={'1' if value is True else value}")

    for key, value in request.items():
        if key == "args":
            for name, arg in value.items():
                put(f"arg.{name}", arg)
        else:
            put(key, value)
    return items


def decode_request(items: list) -> dict:
    request: dict = {"args": {}}
    for item in items:
        key, _, value = item.partition("=")
        target = request["args"] if key.startswith("arg.") else request
        key = key[4:] if key.startswith("arg.") else key
        if key.endswith("[]"):
            target.setdefault(key[:-2], []).append(value)
        else:
            target[key] = value
    return request


def main() -> int:
    if sys.argv[1:] == ["--stdin"]:
        import json

        request = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    else:
        request = decode_request(sys.argv[1:])
    answer = handle(request)
    head = "OK" if answer["ok"] else f"ERROR {answer['kind']}"
    out = f"{head}\n{chr(9).join(answer.get('wrote') or [])}\n{answer['text']}"
    sys.stdout.buffer.write(out.encode("utf-8", "replace"))
    sys.stdout.flush()
    return int(answer.get("exit_code", 0)) if answer["ok"] else 0


def parse_answer(stdout: str) -> dict | None:
    """The host's reading of main()'s output; None when it is not a runner answer."""
    head, sep, rest = stdout.partition("\n")
    wrote, _, text = rest.partition("\n")
    if not sep or not (head == "OK" or head.startswith("ERROR ")):
        return None
    return {
        "ok": head == "OK",
        "kind": head[6:] or None if head != "OK" else None,
        "text": text,
        "wrote": [w for w in wrote.split("\t") if w],
    }


if __name__ == "__main__":
    sys.exit(main())
