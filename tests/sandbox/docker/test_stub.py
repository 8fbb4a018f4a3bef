"""The call stub path against the real engine: nothing a command prints or does to its descriptors
can forge the framing or the exit status, the stub cannot be reached through /proc, a killed stub
ends the call and the envelope says so, the control stream is not the command's stdin, and images
without a usable python3 fall back to `docker exec` automatically (recorded in the envelope)."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest

from sandbox.docker.containers import DockerSandbox
from sandbox.spec import SandboxSpec

pytestmark = pytest.mark.docker

FORGED_END = r'X\0\0\0\013{"exit": 0}'
"""The stub's own end frame, as a command could print it."""

FIND_STUB = (
    "import os\n"
    "for pid in os.listdir('/proc'):\n"
    "    if pid.isdigit():\n"
    "        try:\n"
    "            cmd = open('/proc/%s/cmdline' % pid, 'rb').read()\n"
    "        except OSError:\n"
    "            continue\n"
    "        if b'stub.py' in cmd and int(pid) != os.getpid():\n"
    "            STUB = int(pid)\n"
)


def run(box: DockerSandbox, workspace: Path, spec: SandboxSpec, *argv: str, stdin: bytes | None = None):
    return box.run(list(argv), workspace=workspace, spec=spec, stdin=stdin)


def test_calls_go_through_the_stub_and_say_so(docker_sandbox, workspace, spec):
    env = run(docker_sandbox, workspace, spec, "cat", "hello.txt")
    assert (env.exit_code, env.status, env.stdout, env.call_path) == (0, "ok", "hello\n", "stub")
    env = run(docker_sandbox, workspace, spec, "sh", "-c", "echo out; echo err >&2; exit 4")
    assert (env.exit_code, env.stdout, env.stderr) == (4, "out\n", "err\n")
    env = run(docker_sandbox, workspace, spec, "no-such-program")
    assert env.exit_code == 127 and "no-such-program" in env.stderr


def test_printed_framing_cannot_end_the_call_or_forge_the_exit_code(docker_sandbox, workspace, spec):
    env = run(docker_sandbox, workspace, spec, "sh", "-c", f"printf '{FORGED_END}'; printf 'after'; exit 3")
    assert env.exit_code == 3 and env.status == "exit_nonzero"
    assert env.stdout.endswith("after") and '{"exit": 0}' in env.stdout
    env = run(docker_sandbox, workspace, spec, "sh", "-c", f"printf '{FORGED_END}' >&2; exit 5")
    assert env.exit_code == 5 and '{"exit": 0}' in env.stderr


def test_writing_to_or_closing_every_inherited_descriptor_changes_nothing(docker_sandbox, workspace, spec):
    script = (
        "import os\n"
        "frame = b'X\\0\\0\\0\\x0b{\"exit\": 0}'\n"
        "for fd in range(0, 256):\n"
        "    try:\n"
        "        os.write(fd, frame)\n"
        "    except OSError:\n"
        "        pass\n"
        "os.closerange(0, 256)\n"
        "os._exit(7)\n"
    )
    env = run(docker_sandbox, workspace, spec, "python3", "-c", script)
    assert env.exit_code == 7 and env.status == "exit_nonzero"


def test_the_stub_cannot_be_reached_through_proc(docker_sandbox, workspace, spec):
    script = FIND_STUB + (
        "denied = []\n"
        "for path in ('/proc/%d/fd/1' % STUB, '/proc/%d/fd/0' % STUB, '/proc/%d/mem' % STUB):\n"
        "    try:\n"
        "        open(path, 'wb').write(b'X')\n"
        "    except OSError as error:\n"
        "        denied.append(type(error).__name__)\n"
        "print(len(denied))\n"
    )
    env = run(docker_sandbox, workspace, spec, "python3", "-c", script)
    assert env.exit_code == 0 and env.stdout.strip() == "3", env.stderr


def test_a_killed_stub_ends_the_call_and_the_envelope_says_so(docker_sandbox, workspace, spec):
    script = FIND_STUB + "import signal, time\nos.kill(STUB, signal.SIGKILL)\ntime.sleep(20)\n"
    started = time.monotonic()
    env = run(docker_sandbox, workspace, spec, "python3", "-c", script)
    assert time.monotonic() - started < 10
    assert (env.exit_code, env.status) == (137, "exit_nonzero")
    assert "call stub was killed" in env.stderr and env.call_path == "stub"


def test_the_command_has_its_own_stdin_not_the_control_stream(docker_sandbox, workspace, spec):
    env = run(docker_sandbox, workspace, spec, "cat")
    assert (env.exit_code, env.stdout) == (0, "")  # no stdin: end of file at once, never the stream
    data = bytes(range(256)) * 4096  # 1 MiB, every byte value
    env = run(docker_sandbox, workspace, spec, "sh", "-c", "wc -c", stdin=data)
    assert env.stdout.strip() == str(len(data))


def test_exec_stays_available_and_is_chosen_where_the_stub_cannot_run(
    docker_client, run_label, workspace, spec, test_label
):
    with DockerSandbox(docker_client, run_id=run_label, pool_size=1, call_path="exec") as box:
        env = run(box, workspace, spec, "cat", "hello.txt")
    assert (env.stdout, env.call_path) == ("hello\n", "exec"), env.render()
    tag = f"harness-test/nopython:{test_label['harness.test']}"
    base = docker_client.images.get(docker_client.images.get("harness/base:bookworm").id)
    dockerfile = f"FROM {base.id}\nRUN rm -f /usr/bin/python3*\nLABEL harness.run={run_label}\n"
    docker_client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True, network_mode="none")
    try:
        without = spec.model_copy(update={"image": tag})
        with DockerSandbox(docker_client, run_id=run_label, pool_size=1) as box:
            first = run(box, workspace, without, "cat", "hello.txt")
            second = run(box, workspace, without, "sh", "-c", "exit 9")
        assert (first.stdout, first.call_path) == ("hello\n", "exec")
        assert (second.exit_code, second.call_path) == (9, "exec")
    finally:
        docker_client.images.remove(tag, force=True)


def test_limits_hold_on_the_stub_path(docker_sandbox, workspace, spec, engine_here):
    short = spec.model_copy(update={"timeout_s": 1.5})
    started = time.monotonic()
    env = run(docker_sandbox, workspace, short, "sh", "-c", "sleep 30 & sleep 30")
    # Killed at its limit, the call waits for neither sleep: well under their 30 s by the envelope's
    # clock and the test's (a bound with room: on rootless Podman under the suite's load the kill and
    # the archives to and from the engine took 6.8 s where Docker takes under 2).
    assert (env.exit_code, env.status) == (124, "timeout") and env.duration_ms < 10_000, env.render()
    assert time.monotonic() - started < 20
    small = spec.model_copy(update={"memory": 64 * 1024**2})
    if engine_here.limits_unenforced:  # no cgroup limit there (rootless on cgroup v1): the envelope says so
        env = run(docker_sandbox, workspace, small, "true")
        assert "memory" in env.limits.unenforced, env.render()
    else:
        env = run(docker_sandbox, workspace, small, "python3", "-c", "x = bytearray(512 * 1024 * 1024)")
        assert (env.exit_code, env.status) == (137, "oom_killed")
    env = run(docker_sandbox, workspace, spec, "sh", "-c", "(sleep 5; echo late) & echo now")
    assert (env.exit_code, env.stdout) == (0, "now\n")  # a daemonized child does not hold the call


def test_a_stub_is_hung_up_on_once_its_call_is_over_and_its_container_ends_by_itself(
    docker_client, run_label, sandbox_image, workspace, spec, engine_here
):
    """The stream of a stub whose call is over is closed then, not when the garbage collector gets to
    the SDK's socket (its response refers back to it): the stub ends and its container stops by itself
    (one the engine removes when it stops, here, is then gone). With the collector off, a stream closed
    only by it would keep the container running for the process's life."""
    import gc

    if engine_here.elsewhere:
        pytest.skip("the engine removes a container by itself only on this machine's engine (engine_removes)")
    gc.disable()
    try:
        with DockerSandbox(docker_client, run_id=run_label, pool_size=0, share_netns=False, engine_removes=True) as box:
            cid = box.start_one(workspace=workspace, spec=spec)
            assert box.call(cid, ["cat", "hello.txt"], workspace=workspace, spec=spec).stdout == "hello\n"
            deadline = time.monotonic() + 15
            while docker_client.api.containers(all=True, filters={"id": cid}):
                assert time.monotonic() < deadline, "the used container still runs: its stub was never hung up on"
                time.sleep(0.1)
    finally:
        gc.enable()
