"""What a prune run anywhere (another terminal, a test on another worker) takes for a leftover: a
container whose controller is gone, or which names none. Everything a live process makes for itself
(calls, setups, copies, benches) names its process, so it is left alone."""

from __future__ import annotations

import subprocess
import sys

from sandbox import labels
from sandbox.docker.prune import orphaned_labels


def test_a_live_processs_containers_are_not_leftovers_and_a_dead_ones_are():
    assert not orphaned_labels(labels.of_process("run-1", "setup"))
    assert orphaned_labels(labels.of_run("run-1", "setup")), "naming no process: a leftover"
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    assert orphaned_labels({**labels.of_run("run-1", "setup"), labels.PID: gone.stdout.strip()})


def test_a_state_directory_is_taken_for_deleted_only_when_it_provably_is():
    """An image's state directory counts as deleted only when it provably is: not when a folder on
    its way is one this user may not search (another user's sessions stay theirs)."""
    import os
    import shutil
    import tempfile
    from pathlib import Path

    from sandbox.docker.prune import _absent

    base = Path(tempfile.mkdtemp(prefix="harness-absent-"))  # under /tmp: searchable by every user
    try:
        base.chmod(0o755)
        (base / "locked" / "state").mkdir(parents=True)
        (base / "locked").chmod(0o700)
        paths = [str(base / "deleted"), str(base / "locked" / "state"), str(base / "locked" / "gone")]
        assert [_absent(path) for path in paths] == [True, False, True]
        if os.geteuid() != 0:
            return  # only root can ask as another user; the first half stands
        read, write = os.pipe()
        child = os.fork()
        if child == 0:  # this process's code already loaded: as nobody, only the paths are asked
            try:
                os.setgroups([])
                os.setresgid(65534, 65534, 65534)
                os.setresuid(65534, 65534, 65534)
                os.write(write, " ".join(str(_absent(path)) for path in paths).encode())
            finally:
                os._exit(0)
        os.close(write)
        with os.fdopen(read) as answer:
            seen = answer.read()
        os.waitpid(child, 0)
        assert seen.split() == ["True", "False", "False"], "behind a folder it may not search: not deleted"
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_only_a_temporary_state_directory_gone_is_taken_for_deleted():
    """Gone from a temporary folder, a state directory was deleted; gone from anywhere else it may be on
    a drive not mounted now, so its images are only named."""
    import tempfile

    from sandbox.docker.prune import _temporary

    assert _temporary("/tmp/pytest-of-root/pytest-1/test0/state") and _temporary("/var/tmp/night/state")
    assert _temporary(f"{tempfile.gettempdir()}/harness-trial/state")
    assert not _temporary("/home/someone/.local/share/harness/sessions") and not _temporary("/mnt/data/state")
    assert not _temporary("/tmpfiles/state"), "a sibling whose name starts the same is not inside"
