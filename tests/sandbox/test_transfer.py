"""The archives an engine on another machine works with (sandbox.docker.transfer), without an engine:
what is sent (owners, modes, read-only copies, links never followed), and what comes back made the
same on this machine's disk while hostile archives write nothing outside the workspace."""

from __future__ import annotations

import io
import os
import stat
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.docker import transfer
from sandbox.errors import SpecError
from sandbox.spec import Mount

USER = (10001, 10001)


def _members(archive: io.IOBase) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=archive, mode="r") as tar:
        return {member.name: member for member in tar.getmembers()}


def _chunks(build, top: str = "workspace", size: int = 7) -> Iterator[bytes]:
    """A tar as the engine sends it (its top folder first), in small chunks."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(top)
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(info)
        build(tar)
    data = buffer.getvalue()
    return iter([data[i : i + size * 512] for i in range(0, len(data), size * 512)])


def _file(tar: tarfile.TarFile, name: str, data: bytes = b"x", mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, 1_700_000_000
    tar.addfile(info, io.BytesIO(data))


def _entry(tar: tarfile.TarFile, name: str, kind: bytes, link: str = "", mode: int = 0o755) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, mode
    tar.addfile(info)


def _tree(root: Path) -> dict[str, tuple[str, str]]:
    found = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            found[rel] = ("link", os.readlink(path))
        elif path.is_dir():
            found[rel] = ("dir", oct(path.stat().st_mode & 0o777))
        else:
            found[rel] = ("file", path.read_text() + oct(path.stat().st_mode & 0o777))
    return found


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text("print(1)\n")
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o4755)  # setuid: never sent as such
    (root / "tests").mkdir()
    (root / "tests" / "test_mod.py").write_text("assert True\n")
    (root / "escape").symlink_to("/etc")
    (root / "pkg" / "up").symlink_to("../..")
    (root / "pkg" / "sibling").symlink_to("../run.sh")
    os.mkfifo(root / "pipe")
    return root


def test_the_workspace_goes_as_the_call_users_and_a_read_only_mount_as_roots_without_write_bits(workspace):
    parts = transfer.volumes("/workspace", workspace, [Mount(source=workspace / "tests", target="/workspace/tests")])
    assert list(parts) == ["/workspace"]
    archive = io.BytesIO()
    assert transfer.pack(parts["/workspace"], USER, archive) == [("../..", "pkg/up")], "the engine would refuse it"
    sent = _members(archive)
    assert "pkg/up" not in sent and sent["pkg/sibling"].linkname == "../run.sh"
    assert sent["pkg/mod.py"].uid == 10001 and sent["pkg/mod.py"].mode == 0o644
    assert sent["run.sh"].mode == 0o755, "special bits are dropped"
    assert sent["escape"].issym() and sent["escape"].linkname == "/etc", "a link is sent as a link, never followed"
    assert not any(name.startswith("escape/") for name in sent) and "pipe" not in sent
    assert sent["tests"].uid == 0 and sent["tests/test_mod.py"].uid == 0
    assert sent["tests/test_mod.py"].mode == 0o444 and sent["tests"].mode == 0o555
    assert list(sent).count("tests/test_mod.py") == 1


def test_mounts_outside_the_working_folder_get_volumes_and_a_file_only_under_opt(tmp_path, workspace):
    runner = tmp_path / "runner.py"
    runner.write_text("pass\n")
    cache = tmp_path / "cache"
    (cache / "wheels").mkdir(parents=True)
    mounts = [
        Mount(source=runner, target="/opt/harness/runner.py"),
        Mount(source=runner, target="/opt/harness/__pycache__/runner.pyc"),
        Mount(source=cache, target="/tmp/cache"),
    ]
    parts = transfer.volumes("/workspace", workspace, mounts)
    assert sorted(parts) == ["/opt/harness", "/tmp/cache", "/workspace"]
    archive = io.BytesIO()
    transfer.pack(parts["/opt/harness"], USER, archive)
    sent = _members(archive)
    assert sent["__pycache__"].isdir() and sent["__pycache__"].uid == 0
    assert sent["runner.py"].uid == 0 and sent["__pycache__/runner.pyc"].isreg()
    with pytest.raises(SpecError, match="/etc may hold the image's own files"):
        transfer.volumes("/workspace", workspace, [Mount(source=runner, target="/etc/harness.conf")])


def test_what_comes_back_is_made_the_same_and_an_unchanged_file_is_not_rewritten(tmp_path, workspace):
    (workspace / "pipe").unlink()
    (workspace / "run.sh").chmod(0o755)
    copy = tmp_path / "copy"
    copy.mkdir()
    kept = copy / "pkg"
    (workspace / "pkg" / "up").unlink()
    parts = transfer.volumes("/workspace", workspace, [])["/workspace"]
    sent = io.BytesIO()
    transfer.pack(parts, USER, sent)
    archive = sent.read()
    renamed = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(archive)) as source, tarfile.open(fileobj=renamed, mode="w") as tar:
        _entry(tar, "workspace", tarfile.DIRTYPE)
        for member in source.getmembers():
            data = source.extractfile(member) if member.isreg() else None
            member.name = f"workspace/{member.name}"
            tar.addfile(member, data)
    assert transfer.sync(iter([renamed.getvalue()]), copy, None) > 0
    assert _tree(copy) == _tree(workspace)
    inode = (kept / "mod.py").stat().st_ino
    (copy / "stale.txt").write_text("not in the container")
    (copy / "pkg" / "old").mkdir()
    assert transfer.sync(iter([renamed.getvalue()]), copy, None) == 2, "the two stale paths, nothing else"
    assert (kept / "mod.py").stat().st_ino == inode and _tree(copy) == _tree(workspace)


def test_a_changed_file_a_mode_a_hard_link_and_a_file_become_a_folder(tmp_path):
    root = tmp_path / "w"
    root.mkdir()
    (root / "a.txt").write_text("old")
    (root / "was-file").write_text("x")
    (root / "was-dir").mkdir()

    def build(tar):
        _file(tar, "workspace/a.txt", b"new", 0o600)
        _entry(tar, "workspace/was-file", tarfile.DIRTYPE, mode=0o700)
        _file(tar, "workspace/was-file/inside", b"in")
        _file(tar, "workspace/was-dir", b"now a file", 0o6755)
        _entry(tar, "workspace/twin", tarfile.LNKTYPE, "workspace/a.txt")

    transfer.sync(_chunks(build), root, None)
    assert (root / "a.txt").read_text() == "new" and (root / "a.txt").stat().st_mode & 0o7777 == 0o600
    assert (root / "was-file").is_dir() and (root / "was-file").stat().st_mode & 0o777 == 0o700
    assert (root / "was-dir").read_text() == "now a file"
    assert (root / "was-dir").stat().st_mode & 0o7777 == 0o755, "setuid and setgid never come back"
    assert os.path.samefile(root / "a.txt", root / "twin")
    assert (root / "a.txt").stat().st_mtime == 1_700_000_000


def test_paths_a_read_only_mount_covered_stay_as_they_are_here(tmp_path):
    root = tmp_path / "w"
    (root / "tests").mkdir(parents=True)
    (root / "tests" / "test_x.py").write_text("original")
    (root / "tests" / "local_only.py").write_text("here only")

    def build(tar):
        _entry(tar, "workspace/tests", tarfile.DIRTYPE, mode=0o555)
        _file(tar, "workspace/tests/test_x.py", b"the mount's copy", 0o444)

    transfer.sync(_chunks(build), root, None, keep=["tests"])
    assert (root / "tests" / "test_x.py").read_text() == "original"
    assert (root / "tests" / "local_only.py").exists() and (root / "tests").stat().st_mode & 0o777 != 0o555
    transfer.sync(_chunks(lambda tar: None), root, None, keep=["tests"])
    assert not (root / "tests").exists(), "a covered path the call moved away is gone here too (the check sees it)"


@pytest.mark.parametrize(
    ("build", "said"),
    [
        (lambda tar: _file(tar, "workspace/../outside", b"x"), "not a plain path"),
        (lambda tar: _file(tar, "/etc/outside", b"x"), "outside the working folder"),
        (lambda tar: _file(tar, "elsewhere/outside", b"x"), "outside the working folder"),
        (
            lambda tar: (
                _entry(tar, "workspace/link", tarfile.SYMTYPE, "{outside}"),
                _file(tar, "workspace/link/evil"),
            ),
            "under something that is not a folder",
        ),
        (lambda tar: _entry(tar, "workspace/hard", tarfile.LNKTYPE, "workspace/../../outside/secret"), "plain path"),
        (lambda tar: _entry(tar, "workspace/hard", tarfile.LNKTYPE, "workspace/missing"), "no file of the archive"),
    ],
    ids=["dot-dot", "absolute", "other-top", "through-a-link", "hard-link-out", "hard-link-unseen"],
)
def test_a_hostile_archive_writes_nothing_outside_the_workspace(tmp_path, build, said):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("keep")
    root = tmp_path / "w"
    root.mkdir()

    def hostile(tar):
        original = tarfile.TarFile.addfile

        def addfile(self, info, fileobj=None):
            info.linkname = info.linkname.replace("{outside}", str(outside))
            return original(self, info, fileobj)

        tarfile.TarFile.addfile = addfile  # type: ignore[method-assign]
        try:
            build(tar)
        finally:
            tarfile.TarFile.addfile = original  # type: ignore[method-assign]

    with pytest.raises(transfer.Malformed, match=said):
        transfer.sync(_chunks(hostile), root, None)
    assert sorted(p.name for p in outside.iterdir()) == ["secret"] and (outside / "secret").read_text() == "keep"


def test_devices_and_pipes_are_never_made_and_a_bad_start_is_refused(tmp_path):
    root = tmp_path / "w"
    root.mkdir()

    def build(tar):
        _entry(tar, "workspace/null", tarfile.CHRTYPE)
        _entry(tar, "workspace/fifo", tarfile.FIFOTYPE)

    transfer.sync(_chunks(build), root, None)
    assert list(root.iterdir()) == []
    bad = io.BytesIO()
    with tarfile.open(fileobj=bad, mode="w") as tar:
        _file(tar, "workspace")
    with pytest.raises(transfer.Malformed, match="not a folder"):
        transfer.sync(iter([bad.getvalue()]), root, None)
    with pytest.raises(transfer.Malformed, match="unreadable"):
        transfer.sync(iter([b"not a tar at all" * 64]), root, None)
    assert stat.S_ISDIR(root.stat().st_mode)


def test_podmans_archive_of_a_stopped_container_and_an_empty_answer(tmp_path):
    """Podman 4.3 names a stopped container's folder '' and what is in it `/d/a.txt`; asked while the
    container stops it may send nothing at all (Empty: nothing was written, the caller asks again)."""
    root = tmp_path / "w"
    root.mkdir()

    def build(tar):
        _entry(tar, "/d", tarfile.DIRTYPE)
        _file(tar, "/d/a.txt", b"from a stopped container")
        _entry(tar, "/d/twin", tarfile.LNKTYPE, "/d/a.txt")

    transfer.sync(_chunks(build, top=""), root, None)
    assert (root / "d" / "a.txt").read_text() == "from a stopped container"
    assert os.path.samefile(root / "d" / "a.txt", root / "d" / "twin")
    with pytest.raises(transfer.Empty):
        transfer.sync(iter([]), root, None)
    assert (root / "d" / "a.txt").exists(), "an empty answer removes nothing"


def test_an_upload_the_engine_lost_midway_is_sent_again_whole(tmp_path, workspace):
    """Rootless Podman unpacks in a subprocess of its own that can end before reading the archive (a
    500: "passing bulk input to subprocess: write |1: broken pipe"): the archive goes again from its
    start; any other refusal, or a third loss, is the caller's."""
    import docker
    import requests

    def refusal(explanation: str) -> docker.errors.APIError:
        response = requests.Response()
        response.status_code = 500
        return docker.errors.APIError("engine said no", response=response, explanation=explanation)

    class Engine:
        def __init__(self, *failures: str) -> None:
            self.failures, self.received = list(failures), []

        def put_archive(self, cid, target, archive):
            data = (
                archive if isinstance(archive, bytes) else archive.read(100)
            )  # the subprocess reads a little, then dies
            if self.failures:
                raise refusal(self.failures.pop(0))
            self.received.append(data + (b"" if isinstance(archive, bytes) else archive.read()))
            return True

    lost = "passing bulk input to subprocess: write |1: broken pipe"
    engine = Engine(lost)
    layout = transfer.volumes("/workspace", workspace, [])
    transfer.send(engine, "c", layout, USER)
    (again,) = engine.received
    assert {"pkg/mod.py", "run.sh", "tests/test_mod.py"} <= set(_members(io.BytesIO(again))), "whole, from its start"
    with pytest.raises(docker.errors.APIError, match="no space left"):
        transfer.put(Engine("no space left on device"), "c", "/", b"tar")
    with pytest.raises(docker.errors.APIError, match="broken pipe"):
        transfer.put(Engine(lost, lost, lost), "c", "/", b"tar")
    assert transfer.put(Engine(lost, lost), "c", "/", b"tar") is None


def test_what_changed_since_a_listing_even_a_rewrite_that_keeps_size_and_time(tmp_path, workspace):
    """What a copy on the engine needs again (sandbox.docker.delta): a file rewritten with the same size
    and its modification time set back (as a bring-back does, from the archive's member) is changed;
    a folder whose content changed is not; the workspace's paths under a mount's place are the mount's."""
    from sandbox.docker import delta

    protected = tmp_path / "protected"
    protected.mkdir()
    (protected / "check.py").write_text("assert 1\n")
    parts = transfer.volumes(
        "/workspace", workspace, [Mount(source=protected, target="/workspace/tests", read_only=True)]
    )
    before, source = delta.contents(parts["/workspace"])
    assert "tests/test_mod.py" not in before and source["tests/check.py"] == 1 and source["pkg/mod.py"] == 0
    assert "pipe" not in before, "a pipe never travels"
    mod = workspace / "pkg" / "mod.py"
    when = mod.stat().st_mtime_ns
    mod.write_text("print(2)\n")
    os.utime(mod, ns=(when, when))
    (workspace / "run.sh").unlink()
    (workspace / "pkg" / "new.txt").write_text("n\n")
    (workspace / "pkg" / "up").unlink()
    (workspace / "pkg" / "up").symlink_to("..")
    now, source = delta.contents(parts["/workspace"])
    removed, changed = delta.difference(before, now)
    assert removed == ["pkg/up", "run.sh"], "a link pointing elsewhere is made anew"
    assert changed == ["pkg/mod.py", "pkg/new.txt", "pkg/up"]
    archive = io.BytesIO()
    assert transfer.pack_some(parts["/workspace"], changed, source, USER, archive) == [], "pkg/up now stays inside"
    sent = _members(archive)
    assert sorted(sent) == changed and sent["pkg/mod.py"].uid == 10001
    with tarfile.open(fileobj=io.BytesIO(archive.getvalue())) as tar:
        assert tar.extractfile("pkg/mod.py").read() == b"print(2)\n"  # type: ignore[union-attr]
    (protected / "check.py").write_text("assert 2\n")
    archive = io.BytesIO()
    _, changed = delta.difference(now, delta.contents(parts["/workspace"])[0])
    transfer.pack_some(parts["/workspace"], changed, source, USER, archive)
    [check] = _members(archive).values()
    assert (check.name, check.uid, check.mode & 0o222) == ("tests/check.py", 0, 0), (
        "the mount's copy: root's, read-only"
    )


def test_a_filled_container_gets_nothing_unchanged_and_one_a_change_cannot_reach_is_stale(tmp_path, monkeypatch):
    """`delta.AheadOfCalls` without an engine: a container filled for a workspace gets nothing more when
    nothing changed; one whose removal failed there, or filled for another layout of volumes, is Stale
    (the caller uses a fresh container); one never filled is the caller's to send everything to."""
    from sandbox.docker import delta

    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "a.txt").write_text("a\n")
    sent: list[tuple[str, str]] = []
    monkeypatch.setattr(transfer, "put", lambda api, cid, target, archive: sent.append((cid, target)))
    monkeypatch.setattr(transfer, "run_in", lambda api, cid, argv, user: (1, "rm: cannot remove: Permission denied"))
    ahead = delta.AheadOfCalls(object(), lambda *link: None)
    user, layout = "10001:10001", transfer.volumes("/workspace", workspace, [])
    key = ahead.key("config", workspace, "/workspace", [], user)
    assert key != ahead.key("config", tmp_path, "/workspace", [], user), "another workspace, another key"
    for cid in ("c1", "c2", "c3"):
        ahead.fill(key, cid)
    assert ahead.send("c1", layout, "/workspace", user) and sent == [(c, "/workspace") for c in ("c1", "c2", "c3")]
    (workspace / "a.txt").unlink()
    with pytest.raises(delta.Stale, match="Permission denied"):
        ahead.send("c2", layout, "/workspace", user)
    other = transfer.volumes("/workspace", workspace, [Mount(source=tmp_path, target="/opt/more", read_only=True)])
    with pytest.raises(delta.Stale, match="another layout"):
        ahead.send("c3", other, "/workspace", user)
    assert ahead.send("c4", layout, "/workspace", user) is False
