"""Packing a repository for a worker that does not see it, and unpacking what arrives: the same
tree on the other side (links kept as links, modes, times), the same bytes for the same tree, and an
archive that tries to write outside its folder, through a link, or a device is refused."""

from __future__ import annotations

import gzip
import io
import os
import stat
import tarfile
from pathlib import Path

import pytest

from harness.batch import archive, shipping


def _tree(root: Path) -> dict[str, tuple]:
    """Every entry under root: kind, mode, content or link target, modification time."""
    found = {}
    for folder, dirs, others in os.walk(root):
        for name in dirs + others:
            path = Path(folder) / name
            st = path.lstat()
            rel = str(path.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                found[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                found[rel] = ("dir", stat.S_IMODE(st.st_mode), int(st.st_mtime))
            elif stat.S_ISFIFO(st.st_mode):
                found[rel] = ("fifo",)
            else:
                found[rel] = ("file", stat.S_IMODE(st.st_mode), path.read_bytes(), int(st.st_mtime))
    return found


def _repo(root: Path) -> Path:
    (root / "pkg" / "deep" / "er").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text("def f():\n    return 1\n")
    (root / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "run.sh").chmod(0o755)
    (root / "pkg" / "deep" / "er" / "data.bin").write_bytes(bytes(range(256)) * 100)
    (root / "empty").mkdir()
    os.symlink("/etc/passwd", root / "absolute-link")
    os.symlink("../run.sh", root / "pkg" / "relative-link")
    os.symlink("nowhere", root / "dangling")
    os.mkfifo(root / "fifo")
    os.utime(root / "pkg" / "mod.py", (1_600_000_000, 1_600_000_000))
    return root


def test_a_packed_tree_unpacks_to_the_same_tree_and_the_same_tree_packs_to_the_same_bytes(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "repo")
    data = archive.pack(repo)
    assert archive.pack(repo) == data, "same tree, same bytes: the digest names the content"
    out = tmp_path / "out"
    archive.unpack_into(data, out)
    expected = _tree(repo)
    del expected["fifo"]  # devices, sockets and FIFOs are never shipped (nor copied into workspaces)
    assert _tree(out) == expected
    (repo / "pkg" / "mod.py").write_text("def f():\n    return 2\n")
    assert archive.digest(archive.pack(repo)) != archive.digest(data)


def test_pack_leaves_out_the_named_top_level_entries(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "repo")
    (repo / "workspace").mkdir()
    (repo / "workspace" / "big").write_text("x")
    archive.unpack_into(archive.pack(repo, leave=frozenset({"workspace", "run.sh"})), tmp_path / "out")
    assert not (tmp_path / "out" / "workspace").exists() and not (tmp_path / "out" / "run.sh").exists()
    assert (tmp_path / "out" / "pkg" / "mod.py").is_file()


def _archive(*members: tuple[tarfile.TarInfo, bytes | None]) -> bytes:
    raw = io.BytesIO()
    with gzip.GzipFile(fileobj=raw, mode="wb") as zipped, tarfile.open(fileobj=zipped, mode="w") as archive:
        for info, content in members:
            if content is not None:
                info.size = len(content)
                archive.addfile(info, io.BytesIO(content))
            else:
                archive.addfile(info)
    return raw.getvalue()


def _member(name: str, kind: bytes = tarfile.REGTYPE, *, link: str = "", mode: int = 0o644) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, mode
    return info


@pytest.mark.parametrize(
    ("members", "why"),
    [
        ([(_member("../escape"), b"x")], "refused"),
        ([(_member("/tmp/absolute"), b"x")], "refused"),
        ([(_member("a/../../escape"), b"x")], "refused"),
        ([(_member("link", tarfile.SYMTYPE, link="/tmp"), None), (_member("link/through"), b"x")], "folder"),
        ([(_member("missing/parent"), b"x")], "folder"),
        ([(_member("hard", tarfile.LNKTYPE, link="/etc/passwd"), None)], "not a file"),
        ([(_member("device", tarfile.CHRTYPE), None)], "not a file"),
        ([(_member("file"), b"x"), (_member("file"), b"y")], "exists"),
    ],
)
def test_an_archive_that_reaches_outside_or_holds_odd_entries_is_refused(tmp_path: Path, members, why) -> None:
    target = tmp_path / "out"
    with pytest.raises((ValueError, FileExistsError), match=why if why != "exists" else None):
        archive.unpack_into(_archive(*members), target)
    assert not target.exists(), "nothing half-made is left where the tree was to be"
    assert [p.name for p in tmp_path.iterdir()] == [], "nor a staging folder"
    assert not Path("/tmp/absolute").exists() and not (tmp_path.parent / "escape").exists()


def test_set_id_bits_are_dropped(tmp_path: Path) -> None:
    archive.unpack_into(_archive((_member("tool", mode=0o6755), b"#!/bin/sh\n")), tmp_path / "out")
    assert stat.S_IMODE((tmp_path / "out" / "tool").stat().st_mode) == 0o755


def test_a_worker_that_sees_the_probe_uses_everything_in_place_and_one_that_does_not_needs_a_shipment(
    tmp_path: Path,
) -> None:
    probe = tmp_path / "batch-id"
    probe.write_text("token\n")
    where = shipping.place(tmp_path / "s", tmp_path / "repo", probe=probe, batch_id="token", shipped=None)
    assert where.shared and where.source == "in_place" and where.repo == tmp_path / "repo"
    from harness.errors import ConfigError

    with pytest.raises(ConfigError, match="does not see the batch directory"):
        shipping.place(tmp_path / "s", tmp_path / "repo", probe=probe, batch_id="another", shipped=None)


class _Arrived(shipping.Shipped):
    """A shipment whose bytes are at hand (the cluster's side is in test_cluster); counts fetches."""

    __slots__ = ("calls", "payload")

    def __init__(self, digest: str, payload: bytes) -> None:
        super().__init__(digest, "key")
        self.payload, self.calls = payload, 0

    def data(self, timeout: float) -> bytes:
        self.calls += 1
        return self.payload


def test_the_store_fetches_a_shipment_once_and_refuses_one_that_does_not_match_its_digest(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setattr(shipping, "STORE", tmp_path / "store")
    data = archive.pack(_repo(tmp_path / "repo"))
    shipped = _Arrived(archive.digest(data), data)
    first, again = shipping.fetch(shipped), shipping.fetch(shipped)
    assert first[1] == "fetched" and again == (first[0], "cached") and shipped.calls == 1
    assert (first[0] / "pkg" / "mod.py").is_file()
    forged = _Arrived("0" * 64, data)
    with pytest.raises(shipping.ShipmentLost, match="does not match"):
        shipping.fetch(forged)
    assert not (tmp_path / "store" / "repos" / ("0" * 64)).exists()


def test_a_repository_that_is_not_there_is_a_clear_error_before_anything_is_shipped(tmp_path: Path) -> None:
    from harness.errors import ConfigError

    shipper = shipping.Shipper(client=None)  # nothing reaches the cluster before the path is checked
    with pytest.raises(ConfigError, match="not a directory"):
        shipper.repo(tmp_path / "missing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="not a directory"):
        shipper.repo(tmp_path / "file")
