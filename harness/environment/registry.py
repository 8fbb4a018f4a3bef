"""A devcontainer feature fetched from its OCI registry, as the spec distributes them: the manifest of a
tag (or a digest), its `application/vnd.devcontainers.layer.v1+tar` layer, each checked against the
digest that names it, kept by digest in the user's cache (`features/SHA256.tar`).

Only for a feature the user allows (harness.environment.features) with no source of its own. The registry is
answered as an outsider: HTTPS (plain HTTP only for a registry on this machine's loopback), a token
asked for only at the registry's own host, the manifest and the layer size-capped and checked against
their digests before anything of them is used; a layer larger than a feature may be, or not what the
user pinned, is never downloaded."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

from harness.errors import UsageError

LAYER = "application/vnd.devcontainers.layer.v1+tar"
"""The media type of a feature's layer (the tar of its folder)."""
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MAX_MANIFEST = 256 * 1024
MAX_LAYER = 64 * 1024**2
"""As large as a feature read from this machine may be (harness.environment.features.MAX_BYTES)."""
TIMEOUT_S = 30.0
_DIGEST = re.compile(r"sha256:([0-9a-f]{64})")


def cache_dir() -> Path:
    """Where fetched features are kept (by digest): the user's cache directory."""
    import platformdirs

    return Path(platformdirs.user_cache_dir("harness")) / "features"


def is_registry_reference(ident: str) -> bool:
    """An id of the form REGISTRY/PATH/NAME whose first part names a host (`ghcr.io`, `host:5000`)."""
    registry, _, path = ident.partition("/")
    return bool(path) and ("." in registry or ":" in registry or registry == "localhost") and "://" not in ident


def fetch(ident: str, tag: str, *, layer_digest: str | None = None, cache: Path | None = None) -> Path:
    """The archive of feature `ident` at `tag` (a version, `latest`, or `sha256:MANIFEST`), fetched
    from its registry unless the cache holds it; layer_digest: what the user pinned (a layer of any
    other digest is refused before it is downloaded). UsageError naming what went wrong."""
    import httpx2

    cache = cache or cache_dir()
    if layer_digest is not None and (cache / f"{layer_digest}.tar").is_file():
        kept = cache / f"{layer_digest}.tar"
        if hashlib.sha256(kept.read_bytes()).hexdigest() == layer_digest:
            return kept
    registry, _, repository = ident.partition("/")
    base = f"{'http' if _loopback_host(registry) else 'https'}://{registry}/v2/{repository}"
    where = f"feature {ident}:{tag}"
    try:
        with httpx2.Client(timeout=TIMEOUT_S, follow_redirects=False) as client:
            session = _Session(client, registry, where)
            manifest = session.get(f"{base}/manifests/{tag}", MAX_MANIFEST, accept=MANIFEST)
            wanted = _DIGEST.fullmatch(tag)
            if wanted and hashlib.sha256(manifest).hexdigest() != wanted.group(1):
                raise UsageError(f"{where}: the registry's manifest is not the one its digest names")
            layer = _layer(manifest, where)
            digest = layer["digest"].removeprefix("sha256:")
            if layer_digest is not None and digest != layer_digest:
                raise UsageError(f"{where}: its registry serves sha256 {digest}, not the one your allowlist pins")
            kept = cache / f"{digest}.tar"
            if kept.is_file() and hashlib.sha256(kept.read_bytes()).hexdigest() == digest:
                return kept
            data = session.get(f"{base}/blobs/sha256:{digest}", min(int(layer["size"]), MAX_LAYER), blob=True)
    except httpx2.HTTPError as error:
        raise UsageError(
            f"{where}: its registry did not answer ({type(error).__name__}: {str(error)[:200]}): give the "
            "feature's archive as source in your allowlist"
        ) from None
    if hashlib.sha256(data).hexdigest() != digest:
        raise UsageError(f"{where}: the registry's layer is not the one its manifest names (sha256 differs)")
    cache.mkdir(parents=True, exist_ok=True)
    partial = cache / f".{digest}.{os.getpid()}"
    partial.write_bytes(data)
    partial.replace(kept)
    return kept


class _Session:
    """GETs to one registry, with the anonymous bearer token its 401 asks for (asked at its own host only)."""

    def __init__(self, client: Any, registry: str, where: str) -> None:
        self.client, self.registry, self.where = client, registry, where
        self.token: str | None = None

    def get(self, url: str, limit: int, *, accept: str = "*/*", blob: bool = False) -> bytes:
        for _ in range(2):
            headers = {"Accept": accept, **({"Authorization": f"Bearer {self.token}"} if self.token else {})}
            answer = self._read(url, headers, limit, blob)
            if answer is not None:
                return answer
        raise UsageError(f"{self.where}: the registry refused the token it gave")

    def _read(self, url: str, headers: dict[str, str], limit: int, blob: bool) -> bytes | None:
        for _ in range(4):  # a blob may be redirected (to the registry's storage): HTTPS only, checked by digest
            with self.client.stream("GET", url, headers=headers) as answer:
                if answer.status_code == 401 and self.token is None:
                    self.token = self._token(answer.headers.get("www-authenticate", ""))
                    return None
                if answer.is_redirect and blob:
                    url = str(answer.next_request.url) if answer.next_request else ""
                    if urlsplit(url).scheme != "https" and not _loopback_host(urlsplit(url).netloc):
                        raise UsageError(f"{self.where}: the registry redirects to {url[:120]!r}, not over HTTPS")
                    headers = {"Accept": headers["Accept"]}  # the registry's token stays with the registry
                    continue
                if answer.status_code != 200:
                    raise UsageError(f"{self.where}: the registry answered {answer.status_code} for {url[:200]}")
                return _capped(answer, limit, self.where)
        raise UsageError(f"{self.where}: the registry redirects too many times")

    def _token(self, challenge: str) -> str:
        """The anonymous token a `Bearer realm=...,service=...,scope=...` challenge names."""
        fields = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        realm = fields.get("realm", "")
        if not challenge.lower().startswith("bearer") or not realm:
            raise UsageError(f"{self.where}: the registry asks for credentials harness does not have")
        if urlsplit(realm).netloc.rsplit("@", 1)[-1] != self.registry:
            raise UsageError(
                f"{self.where}: the registry sends for a token to another host ({realm[:120]}): not followed"
            )
        query = urlencode({key: fields[key] for key in ("service", "scope") if key in fields})
        answer = self.client.get(f"{realm}?{query}" if query else realm)
        try:
            data = json.loads(_capped(answer, 64 * 1024, self.where)) if answer.status_code == 200 else {}
        except ValueError:
            data = {}
        token = data.get("token") or data.get("access_token") if isinstance(data, dict) else None
        if not isinstance(token, str) or not token:
            raise UsageError(f"{self.where}: the registry gave no token ({answer.status_code})")
        return token


def _capped(answer: Any, limit: int, where: str) -> bytes:
    declared = answer.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise UsageError(f"{where}: the registry's answer is larger ({declared} bytes) than it may be ({limit})")
    data = bytearray()
    for chunk in answer.iter_bytes():
        data += chunk
        if len(data) > limit:
            raise UsageError(f"{where}: the registry's answer is larger than it may be ({limit} bytes)")
    return bytes(data)


def _layer(manifest: bytes, where: str) -> dict[str, Any]:
    """The feature's layer of an OCI manifest (its digest checked for form, its size for the cap)."""
    try:
        data = json.loads(manifest)
    except (ValueError, RecursionError):
        raise UsageError(f"{where}: the registry's manifest is not JSON") from None
    layers = data.get("layers") if isinstance(data, dict) else None
    found = [item for item in layers or [] if isinstance(item, dict) and item.get("mediaType") == LAYER]
    if len(found) != 1 or not _DIGEST.fullmatch(str(found[0].get("digest"))):
        raise UsageError(f"{where}: the registry's manifest names no feature layer ({LAYER})")
    size = found[0].get("size")
    if not isinstance(size, int) or not 0 < size <= MAX_LAYER:
        raise UsageError(f"{where}: its layer's size ({size}) is not one a feature may have")
    return found[0]


def _loopback_host(netloc: str) -> bool:
    """HOST[:PORT] names this machine's loopback (where a registry may answer over plain HTTP)."""
    from harness.providers.config import host_of

    host = host_of(f"http://{netloc}")
    return host is not None and host.loopback
