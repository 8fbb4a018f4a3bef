"""The runner's path guard, INSIDE the container (stdlib only): gitignore-style patterns, and the
workspace `Space` that resolves every path after os.path.realpath (it must stay inside root and
outside protected / read-only areas) and opens files component by component with O_NOFOLLOW, so a
symlink swapped in after the check is refused, never followed. Mounted read-only beside `runner`.
"""

from __future__ import annotations  # runs in the container's python, 3.8 or newer

import errno
import os


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
