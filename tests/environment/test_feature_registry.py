"""A devcontainer feature the user allows without a source, fetched from its OCI registry (a real HTTP
registry on 127.0.0.1): the anonymous token asked at the registry's own host only, the layer of the
feature's media type checked against its digest and against what the user pinned before it is
downloaded, a manifest digest in the reference checked, redirects to storage without the token,
size caps, the cache by digest, and a registry that does not answer as one clear line."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from harness.config import FeatureAllow
from harness.environment.devcontainer import read
from harness.errors import UsageError
from tests.agent.oci_registry import Registry

pytestmark = pytest.mark.timeout(60)


def _repo(tmp_path: Path, ref: str) -> Path:
    repo = tmp_path / "repo"
    (repo / ".devcontainer").mkdir(parents=True, exist_ok=True)
    (repo / ".devcontainer" / "devcontainer.json").write_text(json.dumps({"image": "i", "features": {ref: {}}}))
    return repo


def test_an_allowed_feature_without_a_source_comes_from_its_registry_checked_and_cached(registry, tmp_path):
    ident = f"{registry}/features/greeter"
    found = read(_repo(tmp_path, f"{ident}:1"), {ident: FeatureAllow(version="1.0.0")})
    [feature] = found.features
    digest = hashlib.sha256(Registry.layer).hexdigest()
    assert feature.fetched and feature.sha256 == digest and feature.version == "1.0.0"
    assert Path(feature.source) == tmp_path / "cache" / "harness" / "features" / f"{digest}.tar"
    paths = dict(Registry.seen)
    assert paths["/v2/features/greeter/manifests/1.0.0"] in ("", "Bearer t0ken")
    assert paths[f"/storage/{digest}"] == "", "the registry's token never goes where it redirects"
    asked = len(Registry.seen)
    again = read(_repo(tmp_path, f"{ident}:1"), {ident: FeatureAllow(version="1.0.0", sha256=digest)})
    assert again.features[0].sha256 == digest and len(Registry.seen) == asked, "pinned and cached: no request"
    manifest = hashlib.sha256(Registry.manifest()).hexdigest()
    pinned = read(_repo(tmp_path, f"{ident}@sha256:{manifest}"), {ident: FeatureAllow(version="1.0.0")})
    assert pinned.features[0].sha256 == digest, "a reference by the manifest's digest"


def test_what_is_not_what_was_pinned_or_asked_is_never_downloaded(registry, tmp_path):
    ident = f"{registry}/features/greeter"
    with pytest.raises(UsageError, match=r"serves sha256 .* not the one your allowlist pins"):
        read(_repo(tmp_path, ident), {ident: FeatureAllow(sha256="0" * 64)})
    assert not any(path.startswith(("/storage", "/v2/features/greeter/blobs")) for path, _ in Registry.seen)
    with pytest.raises(UsageError, match="answered 404"):
        read(_repo(tmp_path, f"{ident}@sha256:{'1' * 64}"), {ident: FeatureAllow(version="1.0.0")})
    Registry.size = 10**9
    with pytest.raises(UsageError, match="its layer's size"):
        read(_repo(tmp_path, ident), {ident: FeatureAllow(version="1.0.0")})
    Registry.size, Registry.realm = None, "http://192.0.2.1/token"
    with pytest.raises(UsageError, match="sends for a token to another host"):
        read(_repo(tmp_path, ident), {ident: FeatureAllow(version="1.0.0")})
    with pytest.raises(UsageError, match="its registry did not answer"):
        read(_repo(tmp_path, "127.0.0.1:9/features/x"), {"127.0.0.1:9/features/x": FeatureAllow(version="1")})
