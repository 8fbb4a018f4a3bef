"""Restoring is a trust boundary too, through the real CLI: a workspace whose repository is full of links
into this machine's paths is rolled back, forked and resumed without reading or writing anything
outside it; a snapshot object altered on disk is refused in one line (exit 65) by rollback, fork, diff
and export alike, and nothing is half-made (no step appended, no fork left, the workspace as it was)."""

from __future__ import annotations

import hashlib
import shutil
import zlib
from pathlib import Path

import pytest

from tests.agent.conftest import EXAMPLE, FIX_SCRIPT, Harness, turn

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]


def _tree_state(folder: Path) -> dict[str, str]:
    """Every path under folder (links as their target, files as their hash), links never followed."""
    found = {}
    for path in sorted(folder.rglob("*")):
        rel = str(path.relative_to(folder))
        if path.is_symlink():
            found[rel] = "-> " + str(path.readlink())
        elif path.is_file():
            found[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            found[rel] = "dir"
    return found


def test_links_into_this_machine_are_restored_as_links_and_nothing_outside_is_touched(tmp_path, run_label, script):
    host = tmp_path / "host"
    host.mkdir()
    (host / "secret.txt").write_text("the host's own file\n")
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLE, repo, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    (repo / "hostdir").symlink_to(host)
    (repo / "hostfile").symlink_to(host / "secret.txt")
    (repo / "up").symlink_to("../..")
    (repo / "etc").symlink_to("/etc")
    (repo / "swap1.py").write_text(
        "import os, pathlib\nfor name in ('hostdir', 'hostfile', 'up'):\n    os.unlink(name)\n"
        "os.mkdir('hostdir'); os.mkdir('up')\npathlib.Path('hostdir/secret.txt').write_text('planted\\n')\n"
        "pathlib.Path('hostfile').write_text('x\\n'); pathlib.Path('up/z').write_text('y\\n')\n"
    )
    (repo / "swap2.py").write_text(
        "import os, shutil\nshutil.rmtree('hostdir'); shutil.rmtree('up'); os.unlink('hostfile')\n"
        "os.symlink('/etc/passwd', 'hostdir')\n"
    )
    before_host = _tree_state(host)
    harness = Harness(tmp_path / "sessions", run_label)
    model = script(
        turn("Replacing the links.", ("run_command", {"command": "python3 swap1.py"})),
        turn("And back.", ("run_command", {"command": "python3 swap2.py"})),
        turn("Done."),
    )
    ran = harness("run", "--image", "py311", "--model", model, str(repo), "--task", "t", "--no-verify",
                  "--session", "links", "--json")  # fmt: skip
    assert ran.code == 10, ran.stdout + ran.stderr
    workspace = harness.session_dir("links") / "workspace"
    for to in (1, 0, 2, 1):
        rolled = harness("rollback", "links", "--to", str(to))
        assert rolled.code == 0, rolled.stdout + rolled.stderr
        assert _tree_state(host) == before_host, f"rollback to {to} touched the host's folder"
    assert (workspace / "hostdir").is_dir() and not (workspace / "hostdir").is_symlink()
    assert (workspace / "hostdir" / "secret.txt").read_text() == "planted\n"
    rolled = harness("rollback", "links", "--to", "0")
    assert rolled.code == 0 and (workspace / "hostdir").readlink() == host and (workspace / "etc").is_symlink()
    forked = harness("fork", "links", "--at", "1", "--model", f"scripted:{FIX_SCRIPT}", "--out", str(tmp_path / "f"))
    assert forked.code in (0, 10, 11), forked.stdout + forked.stderr
    assert _tree_state(host) == before_host and (host / "secret.txt").read_text() == "the host's own file\n"
    assert not (Path("/etc") / "z").exists()


def _alter(store: Path, content: bytes) -> Path:
    """Write another blob's bytes under the name of content's blob (as an attacker with the disk would)."""
    oid = hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()
    path = store / "objects" / oid[:2] / oid[2:]
    assert path.is_file(), path
    altered = content.replace(b"return a - b", b"return a * b")
    path.chmod(0o644)
    path.write_bytes(zlib.compress(b"blob %d\0" % len(altered) + altered))
    return path


def test_an_object_altered_on_disk_is_refused_whole_by_every_command(tmp_path, run_label):
    harness = Harness(tmp_path / "sessions", run_label)
    ran = harness.run(f"scripted:{FIX_SCRIPT}", session="altered")
    assert ran.code == 0, ran.stdout + ran.stderr
    store = next(p for p in (tmp_path / "sessions").rglob("objects") if p.is_dir()).parent
    _alter(store, (EXAMPLE / "calc" / "ops.py").read_bytes())
    workspace = harness.session_dir("altered") / "workspace"
    steps = (harness.session_dir("altered") / "steps.jsonl").read_text()
    for args in (
        ("rollback", "altered", "--to", "0"),
        ("diff", "altered", "--from", "0"),
        ("export", "altered", "-o", str(tmp_path / "change.patch")),
        ("fork", "altered", "--at", "1", "--model", f"scripted:{FIX_SCRIPT}", "--out", str(tmp_path / "forks")),
    ):
        done = harness(*args)
        lines = done.stderr.strip().splitlines()
        assert done.code == 65, (args, done.stdout, done.stderr)
        assert len(lines) == 1 and "was altered on disk" in lines[0] and "Traceback" not in done.stderr, done.stderr
    if workspace.exists():  # made again from the last step when a command opened the session: that state
        assert "return a + b" in (workspace / "calc" / "ops.py").read_text(), "a refused restore changed the workspace"
    assert (harness.session_dir("altered") / "steps.jsonl").read_text() == steps, "a refused rollback left a step"
    assert not (tmp_path / "forks").exists() or not list((tmp_path / "forks").rglob("session.json"))
    assert not (tmp_path / "change.patch").exists()
