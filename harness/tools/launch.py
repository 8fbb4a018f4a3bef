"""How the in-container runner is mounted and started: its source plus bytecode compiled on the host.

`python3 runner.py` compiles the whole script on every start (here as long as the interpreter's own
start-up, and a file tool starts one interpreter per call). A module IMPORTED from sys.path loads
its `__pycache__` .pyc instead, so the runner is imported, not run as a script, and the .pyc —
compiled on the host, checked by the container's python against the mounted source's mtime and size —
is mounted read-only beside it. A container whose python has another version tag ignores the file
and compiles from source: slower, same result. Nothing here is writable from the container.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import py_compile
import sys
import tempfile
from pathlib import Path

from harness.tools import fileops, pathguard, runner, testrun, unified_diff
from sandbox.spec import Mount

RUNNER_DIR = "/opt/harness"
RUNNER_TARGET = f"{RUNNER_DIR}/runner.py"
RUNNER_ARGV = (
    "python3",
    "-I",
    "-S",
    "-B",
    "-c",
    "import sys;sys.path[:0]=[sys.argv.pop(1).rpartition('/')[0]];import runner;sys.exit(runner.main())",
    RUNNER_TARGET,
)
"""-I: no environment, no user site, no cwd on sys.path (the cwd is the untrusted workspace);
-S: no site module; -B: never try to write bytecode (the mounts are read-only). The runner's path is
an argument of its own (not inside the code) so a sandbox that maps container paths sees it."""


def runner_mounts() -> list[Mount]:
    """The runner and its siblings, read-only, each with its .pyc for this python when one can be made."""
    modules = (runner, pathguard, fileops, testrun, unified_diff)
    return [mount for module in modules for mount in _module_mounts(Path(str(module.__file__)).resolve())]


def _module_mounts(source: Path) -> list[Mount]:
    mounts = [Mount(source=source, target=f"{RUNNER_DIR}/{source.name}", read_only=True)]
    stat = source.stat()
    pyc = _bytecode(str(source), stat.st_mtime_ns, stat.st_size)
    if pyc is not None and not _current(pyc, stat.st_mtime_ns, stat.st_size):  # removed or replaced since
        _bytecode.cache_clear()
        pyc = _bytecode(str(source), stat.st_mtime_ns, stat.st_size)
    if pyc is not None:
        target = f"{RUNNER_DIR}/__pycache__/{source.stem}.{sys.implementation.cache_tag}.pyc"
        mounts.append(Mount(source=Path(pyc), target=target, read_only=True))
    return mounts


@functools.lru_cache(maxsize=8)
def _bytecode(source: str, mtime_ns: int, size: int) -> str | None:
    """A current timestamp-checked .pyc of source: the usual __pycache__ one (written when missing or
    stale), else one in a private temp dir; None when none can be written."""
    usual = importlib.util.cache_from_source(source)
    if _current(usual, mtime_ns, size) or _compile(source, usual, mtime_ns, size):
        return usual
    private = os.path.join(tempfile.mkdtemp(prefix="harness-runner-"), os.path.basename(usual))
    return private if _compile(source, private, mtime_ns, size) else None


def _compile(source: str, target: str, mtime_ns: int, size: int) -> bool:
    try:
        py_compile.compile(
            source, cfile=target, doraise=True, invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP
        )
    except (OSError, py_compile.PyCompileError):
        return False
    return _current(target, mtime_ns, size)


def _current(pyc: str, mtime_ns: int, size: int) -> bool:
    """Whether pyc's header matches this python and the source's mtime and size (what import checks)."""
    try:
        with open(pyc, "rb") as handle:
            header = handle.read(16)
    except OSError:
        return False
    return (
        len(header) == 16
        and header[:4] == importlib.util.MAGIC_NUMBER
        and header[4:8] == b"\0\0\0\0"
        and int.from_bytes(header[8:12], "little") == (mtime_ns // 10**9) & 0xFFFFFFFF
        and int.from_bytes(header[12:16], "little") == size & 0xFFFFFFFF
    )
