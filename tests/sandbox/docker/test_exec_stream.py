"""An exec's output is read whole when the engine's answer to its start carries the stream's first
bytes in the same segment as its head (an engine over TCP, a relay): the docker SDK hands over the
socket under the HTTP client's buffer, and what that buffer holds is taken first (`read_ahead`).
Against a wire server on 127.0.0.1 that answers as Docker does, with the real SDK client."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import docker
import pytest

from sandbox.docker.call import frames, read_ahead

HEAD = (
    b"HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\n"
    b"Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n"
)


def frame(stream: int, data: bytes) -> bytes:
    return bytes([stream, 0, 0, 0]) + len(data).to_bytes(4, "big") + data


@pytest.fixture
def engine() -> Iterator[tuple[str, list[bytes]]]:
    """An engine's exec start on 127.0.0.1: the answers to send, each in one piece, are put in the list."""
    listener = socket.create_server(("127.0.0.1", 0))
    answers: list[bytes] = []

    def answer(conn: socket.socket, said: bytes) -> None:
        with conn:
            request = b""
            while b"\r\n\r\n" not in request:
                request += conn.recv(65536)
            head, _, body = request.partition(b"\r\n\r\n")
            length = next(
                (
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                ),
                0,
            )
            while len(body) < length:
                body += conn.recv(65536)
            conn.sendall(said)  # the head and what follows it in one piece
            conn.shutdown(socket.SHUT_WR)
            while conn.recv(65536):
                pass

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=answer, args=(conn, answers.pop(0)), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield f"tcp://127.0.0.1:{listener.getsockname()[1]}", answers
    listener.close()


def _output(host: str) -> list[tuple[int, bytes]]:
    api = docker.APIClient(base_url=host, version="1.41")
    try:
        sock = api.exec_start("0123abcd", socket=True)
        ahead = read_ahead(sock)
        try:
            return list(frames(sock, ahead))
        finally:
            raw = sock._sock  # (a closed SocketIO forgets its socket)
            sock.close()
            raw.close()
    finally:
        api.close()


def test_output_that_came_with_the_head_is_read(engine) -> None:
    host, answers = engine
    answers.append(HEAD + frame(1, b"hello\n") + frame(2, b"warned\n") + frame(1, b"x" * 70_000))
    assert _output(host) == [(1, b"hello\n"), (2, b"warned\n"), (1, b"x" * 70_000)]


def test_a_head_alone_and_a_frame_cut_off_midway(engine) -> None:
    host, answers = engine
    answers.append(HEAD)
    assert _output(host) == []
    answers.append(HEAD + frame(1, b"whole\n") + frame(1, b"cut off here")[:-4])
    assert _output(host) == [(1, b"whole\n"), (1, b"cut off ")]
