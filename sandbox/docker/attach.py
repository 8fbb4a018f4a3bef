"""`python -m sandbox.docker.attach CONTAINER [DOCKER_HOST]`: this process's stdin and stdout joined to
a running container's (its stdout only: the container's stderr is dropped here, kept by the
engine), so a client that speaks over a subprocess's pipes (the MCP SDK's stdio client) speaks to a
server inside a container. Ends when either side closes."""

from __future__ import annotations

import os
import sys
import threading

import docker
from docker.utils.socket import STDOUT, frames_iter


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m sandbox.docker.attach CONTAINER [DOCKER_HOST]", file=sys.stderr)
        return 64
    client = docker.DockerClient(base_url=argv[1]) if len(argv) > 1 and argv[1] else docker.from_env()
    try:
        sock = client.api.attach_socket(argv[0], params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
    except docker.errors.APIError as error:
        print(f"cannot attach to {argv[0]}: {error.explanation or error}", file=sys.stderr)
        return 69
    raw = getattr(sock, "_sock", sock)

    def forward_stdin() -> None:
        try:
            while True:
                chunk = os.read(0, 65536)
                if not chunk:
                    break
                raw.sendall(chunk)
        except OSError:
            pass
        finally:
            try:
                raw.shutdown(1)  # the server sees end of input
            except OSError:
                pass

    threading.Thread(target=forward_stdin, daemon=True).start()
    out = sys.stdout.buffer
    try:
        for stream, data in frames_iter(sock, tty=False):
            if stream == STDOUT:
                out.write(data)
                out.flush()
    except (OSError, ValueError):
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
