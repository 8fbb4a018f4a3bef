"""An OCI registry on 127.0.0.1 (the distribution API's manifests and blobs, an anonymous bearer token
asked by a 401, blobs redirected to storage): a devcontainer feature for the tests that fetch one, and
images (`Registry.images`, made by `image`) for the engine to pull."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import tarfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar


def _layer() -> bytes:
    files = {
        "devcontainer-feature.json": json.dumps({"id": "greeter", "version": "1.0.0"}).encode(),
        "install.sh": b"#!/bin/sh\necho hello > /opt/greeting\n",
    }
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:  # a plain tar, as the spec's layer is
        for name, data in files.items():
            info = tarfile.TarInfo(f"./{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


class Registry(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    layer: ClassVar[bytes] = _layer()
    size: ClassVar[int | None] = None
    realm: ClassVar[str | None] = None
    seen: ClassVar[list[tuple[str, str]]] = []
    images: ClassVar[dict[tuple[str, str], tuple[bytes, dict[str, bytes]]]] = {}
    """(name, tag) -> (its manifest, its blobs by digest)."""

    @classmethod
    def manifest(cls) -> bytes:
        digest = hashlib.sha256(cls.layer).hexdigest()
        return json.dumps({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.devcontainers", "digest": "sha256:" + "e" * 64, "size": 0},
            "layers": [
                {"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": "sha256:" + "e" * 64, "size": 0},
                {"mediaType": "application/vnd.devcontainers.layer.v1+tar", "digest": f"sha256:{digest}",
                 "size": cls.size or len(cls.layer)},
            ],
        }).encode()  # fmt: skip

    def do_GET(self) -> None:
        self.seen.append((self.path, self.headers.get("Authorization") or ""))
        host = f"127.0.0.1:{self.server.server_address[1]}"
        manifest = self.manifest()
        digest = hashlib.sha256(self.layer).hexdigest()
        if self.path.startswith("/token"):
            return self._send(200, json.dumps({"token": "t0ken"}).encode())
        if self.path.startswith("/storage/"):
            return self._send(200, self.layer)
        if self.headers.get("Authorization") != "Bearer t0ken":
            realm = self.realm or f"http://{host}/token"
            challenge = f'Bearer realm="{realm}",service="{host}",scope="repository:features/greeter:pull"'
            return self._send(401, b"{}", {"WWW-Authenticate": challenge})
        if self.path in (
            "/v2/features/greeter/manifests/1.0.0",
            "/v2/features/greeter/manifests/latest",
            f"/v2/features/greeter/manifests/sha256:{hashlib.sha256(manifest).hexdigest()}",
        ):
            return self._send(200, manifest)
        if self.path == f"/v2/features/greeter/blobs/sha256:{digest}":
            return self._send(307, b"", {"Location": f"http://{host}/storage/{digest}"})
        return self._image(head=False)

    def do_HEAD(self) -> None:
        self.seen.append((self.path, self.headers.get("Authorization") or ""))
        return self._image(head=True)

    def _image(self, head: bool) -> None:
        """/v2/ and an image's manifests and blobs (the engine's pull asks for these)."""
        if self.path == "/v2/":
            return self._send(200, b"{}", head=head)
        for (name, tag), (manifest, blobs) in self.images.items():
            digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
            if self.path in (f"/v2/{name}/manifests/{tag}", f"/v2/{name}/manifests/{digest}"):
                kind = {"Content-Type": json.loads(manifest)["mediaType"], "Docker-Content-Digest": digest}
                return self._send(200, manifest, kind, head=head)
            for blob, data in blobs.items():
                if self.path == f"/v2/{name}/blobs/{blob}":
                    return self._send(200, data, {"Docker-Content-Digest": blob}, head=head)
        return self._send(404, b"", head=head)

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None, head: bool = False) -> None:
        self.send_response(status)
        for name, value in {**(headers or {}), "Content-Length": str(len(body))}.items():
            self.send_header(name, value)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        return None


@contextmanager
def serving() -> Iterator[str]:
    """The registry's HOST:PORT while it serves (its settings reset)."""
    Registry.seen, Registry.size, Registry.realm, Registry.images = [], None, None, {}
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Registry)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def image(files: dict[str, bytes]) -> tuple[bytes, dict[str, bytes]]:
    """An image of one layer holding files (an OCI manifest and its blobs), as a registry serves it."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            archive.addfile(info, io.BytesIO(data))
    layer = buffer.getvalue()
    layer_digest = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = json.dumps({
        "architecture": "amd64", "os": "linux", "config": {},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
    }).encode()  # fmt: skip
    config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest,
                   "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer_digest,
                    "size": len(layer)}],
    }).encode()  # fmt: skip
    return manifest, {config_digest: config, layer_digest: layer}
