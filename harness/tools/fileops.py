"""The file tools' operations, INSIDE the container (stdlib only): read_file, list_dir, apply_patch,
write_file and search_code, each an `op_*` on a `pathguard.Space`. The read path imports neither json
nor re (python's start-up is most of a read_file call); unified diffs are parsed by unified_diff.py.
Mounted read-only beside `runner`.
"""

from __future__ import annotations  # runs in the container's python, 3.8 or newer

import os

if __package__:  # on the host, as harness.tools.fileops
    from harness.tools.pathguard import Failure, Patterns, Space, in_area, read_text
else:  # in the container (/opt/harness is first on sys.path), or run as a script
    from pathguard import Failure, Patterns, Space, in_area, read_text  # type: ignore[import-not-found,no-redef]

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


RAW_LIMIT = 256 * 1024
"""The most text one raw read returns (a hosted agent's `fs/read_text_file`: it asks for lines)."""


def op_read_raw(space: Space, args: dict, max_bytes: int) -> dict:
    """A text file's content as it is (no numbers, no markers): lines from `line` (1-based), at most
    `limit` of them; a hosted agent's file-system read."""
    import json

    path = args["path"]
    text = read_text(space, space.resolve(path), path)
    start, limit = int(args.get("line") or 1), args.get("limit")
    if start > 1 or limit is not None:
        lines = text.splitlines(keepends=True)
        text = "".join(lines[start - 1 : None if limit is None else start - 1 + int(limit)])
    if len(json.dumps(text)) > RAW_LIMIT:  # as the answer carries it
        raise Failure("output_limit", f"{path}: over {RAW_LIMIT} bytes in one read; ask for fewer lines (line, limit).")
    return {"ok": True, "text": text}


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
