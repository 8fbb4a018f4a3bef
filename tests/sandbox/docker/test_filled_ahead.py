"""A pooled call container of an engine that takes archives is filled while it waits for its call, and
its call gets only what changed here since (sandbox.docker.delta): the call still sees the workspace
and its mounts exactly as they are at the call."""

from __future__ import annotations

import os
import shutil
import tarfile

import pytest

from sandbox.docker import transfer
from sandbox.docker.containers import DockerSandbox
from sandbox.docker.delta import Stale
from sandbox.owner import hand_over
from sandbox.spec import Mount

pytestmark = pytest.mark.docker

SHOW = (
    "cat a.txt; test -e b.txt || echo 'b.txt gone'; cat new/c.txt; readlink link; readlink pkg/up; "
    "stat -c %a keep/x.txt; ls tests; cat tests/protected/check.py; echo made > out.txt"
)


def test_a_call_gets_only_what_changed_since_its_container_was_filled(
    docker_client, run_label, spec, tmp_path, monkeypatch
) -> None:
    workspace, protected = tmp_path / "workspace", tmp_path / "protected"
    for folder in (workspace / "keep", workspace / "tests", workspace / "pkg", protected):
        folder.mkdir(parents=True)
    (workspace / "big.bin").write_bytes(os.urandom(1 << 20))
    (workspace / "a.txt").write_text("aaaa\n")
    (workspace / "b.txt").write_text("b\n")
    (workspace / "keep" / "x.txt").write_text("x\n")
    (workspace / "tests" / "test_x.py").write_text("assert True\n")
    (workspace / "link").symlink_to("a.txt")
    (protected / "check.py").write_text("assert 1\n")
    hand_over(workspace)
    mounts = [Mount(source=protected, target="/workspace/tests/protected", read_only=True)]
    sent: list[tuple[str, list[str]]] = []
    put = transfer.put

    def recorded(api, cid, target, archive):
        if not isinstance(archive, bytes):
            with tarfile.open(fileobj=archive, mode="r") as tar:
                sent.append((target, tar.getnames()))
        put(api, cid, target, archive)

    monkeypatch.setattr(transfer, "put", recorded)
    names = lambda: {name for target, listed in sent if target == "/workspace" for name in listed}  # noqa: E731
    with DockerSandbox(docker_client, run_id=run_label, pool_size=1, transport="archive") as box:
        ahead = box._ahead
        told: list[str] = []  # what each call's container was told: changes, or everything (and why)
        delta = ahead.send

        def sending(cid, layout, workdir, user):
            filled = cid in ahead._filled
            try:
                done = delta(cid, layout, workdir, user)
            except Stale as error:
                told.append(f"stale: {error}")
                raise
            told.append("changes" if done else f"everything ({'filled' if filled else 'not filled'})")
            return done

        monkeypatch.setattr(ahead, "send", sending)
        assert box.run(["true"], workspace=workspace, spec=spec, mounts=mounts).exit_code == 0
        assert box.pool.wait_idle(), "the next call's container neither started nor failed in a minute"
        assert not box.pool.failed, box.pool.failed
        assert ahead._filled, "the next call's container was filled"
        assert "big.bin" in names(), "filled with the whole workspace"
        told.clear()
        sent.clear()
        a = workspace / "a.txt"
        when = a.stat().st_mtime_ns
        a.write_text("AAAA\n")  # the same size, its time set back: a change all the same
        os.utime(a, ns=(when, when))
        (workspace / "b.txt").unlink()
        (workspace / "new").mkdir()
        (workspace / "new" / "c.txt").write_text("c\n")
        (workspace / "link").unlink()
        (workspace / "link").symlink_to("keep/x.txt")
        (workspace / "pkg" / "up").symlink_to("../..")  # climbs out of its volume: made in the container
        (workspace / "keep" / "x.txt").chmod(0o600)
        (protected / "check.py").write_text("assert 2\n")  # (no hand_over: its chown would change every file)
        second = box.run(["sh", "-c", SHOW], workspace=workspace, spec=spec, mounts=mounts)
        assert second.exit_code == 0, second.stderr
        assert second.stdout.split("\n") == [
            "AAAA", "b.txt gone", "c", "keep/x.txt", "../..", "600", "protected", "test_x.py", "assert 2", "",
        ]  # fmt: skip
        assert told == ["changes"], (told, box.pool.failed)
        assert names() == {"a.txt", "new", "new/c.txt", "link", "keep/x.txt", "tests/protected/check.py"}, sent
        assert (workspace / "out.txt").read_text() == "made\n", "what the call wrote came back"
        assert (workspace / "pkg" / "up").is_symlink()
        box.pool.wait_idle()
        sent.clear()
        shutil.rmtree(workspace / "tests")  # the folder the mount's place is in: a fresh container, sent whole
        third = box.run(
            ["sh", "-c", "ls tests; cat tests/protected/check.py; cat out.txt"],
            workspace=workspace,
            spec=spec,
            mounts=mounts,
        )
        assert (third.exit_code, third.stdout) == (0, "protected\nassert 2\nmade\n"), third.stderr
        assert "big.bin" in names()
        box.pool.wait_idle()
        other = tmp_path / "other"
        other.mkdir()
        (other / "a.txt").write_text("other\n")
        hand_over(other)
        elsewhere = box.run(["sh", "-c", "ls; cat a.txt"], workspace=other, spec=spec, mounts=mounts)
        assert elsewhere.stdout == "a.txt\ntests\nother\n", "a container filled for one workspace is never another's"
