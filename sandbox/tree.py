"""Walking and removing directory trees without recursing on the Python stack.

A repository may nest folders thousands deep (on purpose or not); the standard library's os.walk,
shutil.rmtree and copytree recurse and die with RecursionError there. These keep an explicit stack,
never follow symlinks, and visit a directory before anything inside it.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
PostOrder = Generator["PostOrder[T]", T, T]
"""A walk of one node: yields the walks of its children, is sent each child's result, returns its own."""


def walk(top: str | Path) -> Iterator[tuple[str, list[str], list[str]]]:
    """(directory, subdirectory names, other names) for top and every directory below it, parents
    first; symlinks (to directories too) are listed among the other names and never entered.
    Removing a name from the yielded subdirectory list prunes it, as with os.walk."""
    stack = [os.fspath(top)]
    while stack:
        folder = stack.pop()
        dirs: list[str] = []
        others: list[str] = []
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    (dirs if entry.is_dir(follow_symlinks=False) else others).append(entry.name)
        except (FileNotFoundError, NotADirectoryError):
            continue
        dirs.sort()
        others.sort()
        yield folder, dirs, others
        stack.extend(os.path.join(folder, name) for name in reversed(dirs))


def remove_tree(top: str | Path, *, ignore_errors: bool = False) -> None:
    """Delete top and everything below it, deepest first, never following a symlink out."""
    top = os.fspath(top)
    try:
        if not stat.S_ISDIR(os.lstat(top).st_mode):
            os.unlink(top)
            return
    except FileNotFoundError:
        return
    folders: list[str] = []
    try:
        for folder, _, others in walk(top):
            folders.append(folder)
            for name in others:
                _quietly(os.unlink, os.path.join(folder, name), ignore_errors)
        for folder in reversed(folders):
            _quietly(os.rmdir, folder, ignore_errors)
    except OSError:
        if not ignore_errors:
            raise


def _quietly(action: Callable[[str], None], path: str, ignore_errors: bool) -> None:
    if ignore_errors:
        with contextlib.suppress(OSError):
            action(path)
    else:
        action(path)


def copy_tree(src: str | Path, dst: str | Path) -> None:
    """Copy a tree as it is: directories, regular files (with their times and modes), symlinks as links."""
    import shutil

    src, dst = Path(src), Path(dst)
    dst.mkdir(parents=True, exist_ok=False)
    for folder, dirs, others in walk(src):
        target = dst / os.path.relpath(folder, src)
        for name in dirs:
            (target / name).mkdir()
        for name in others:
            source = os.path.join(folder, name)
            if os.path.islink(source):
                os.symlink(os.readlink(source), target / name)
            elif os.path.isfile(source):
                shutil.copy2(source, target / name, follow_symlinks=False)


def post_order(top: PostOrder[T]) -> T:
    """Run a post-order walk with an explicit stack: each node's walk yields its children's walks and
    is resumed with their results, so a tree of any depth is computed without recursion."""
    stack: list[PostOrder[T]] = [top]
    answer: T | None = None
    fresh = True  # the walk on top was just pushed: start it with next(), not send()
    while True:
        try:
            child = next(stack[-1]) if fresh else stack[-1].send(answer)  # type: ignore[arg-type]
        except StopIteration as done:
            stack.pop()
            if not stack:
                return done.value
            answer, fresh = done.value, False
            continue
        stack.append(child)
        fresh = True
