"""What only the real sandbox guarantees: isolation and limits, proved against the real engine."""

from __future__ import annotations

import hashlib
import os
import shutil
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from sandbox.docker.containers import DockerSandbox
from sandbox.docker.engine import engine_kind
from sandbox.docker.prune import find_containers, remove_image
from sandbox.session.workspace import copy_repository

pytestmark = [pytest.mark.docker, pytest.mark.timeout(180)]


def _py(source: str) -> list[str]:
    return ["python3", "-c", textwrap.dedent(source)]


# A container's own writable layer names it.
LAYER = "$(hostname)$(grep -o 'upperdir=[^,]*' /proc/self/mountinfo | head -1 | sed 's#.*/overlay2/#-#; s#/diff##')"
"""Which container a call ran in: its host name (the engine names each after its id) and its writable
layer's folder where the engine shows it: a call that joins a network namespace holder on Docker (an
engine elsewhere) has the holder's host name, and Podman's fuse-overlayfs shows no such folder."""


def _host_processes_with(marker: str) -> list[int]:
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if marker in " ".join(proc.info["cmdline"] or []):
            found.append(proc.info["pid"])
    return found


def test_timeout_kills_background_children_and_daemons(
    docker_sandbox: DockerSandbox, docker_client, workspace, spec, test_label
) -> None:
    script = (
        "sleep 3171 & setsid sleep 3172 & (setsid sh -c 'sleep 3173' &) ; nohup sleep 3174 >/dev/null 2>&1 & sleep 3175"
    )
    env = docker_sandbox.run(["sh", "-c", script], workspace=workspace, spec=spec.model_copy(update={"timeout_s": 2}))
    assert (env.exit_code, env.status) == (124, "timeout")
    deadline = time.monotonic() + 10
    while _host_processes_with("sleep 317") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _host_processes_with("sleep 317") == []
    docker_sandbox.close()
    assert find_containers(docker_client, test_label) == []


def test_daemon_left_by_a_finished_command_dies_and_the_call_returns(docker_sandbox, workspace, spec) -> None:
    env = docker_sandbox.run(["sh", "-c", "setsid sleep 3181 & echo done"], workspace=workspace, spec=spec)
    assert (env.exit_code, env.status, env.stdout) == (0, "ok", "done\n")
    deadline = time.monotonic() + 10
    while _host_processes_with("sleep 3181") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _host_processes_with("sleep 3181") == []


def unenforced_and_said(box, workspace, spec, limit: str) -> None:
    """On an engine that sets no cgroup limit (rootless on cgroup v1): the envelope names the limit
    unenforced (the hog or storm itself is not run there: nothing would stop it)."""
    env = box.run(["true"], workspace=workspace, spec=spec)
    assert env.exit_code == 0 and limit in env.limits.unenforced, env.render()


def test_memory_hog_is_oom_killed_and_reported(docker_sandbox, workspace, spec, engine_here) -> None:
    if engine_here.limits_unenforced:
        return unenforced_and_said(docker_sandbox, workspace, spec, "memory")
    assert docker_sandbox.run(["true"], workspace=workspace, spec=spec).limits.unenforced == []
    env = docker_sandbox.run(
        _py("b = bytearray(400 * 1024 * 1024); print('survived')"),
        workspace=workspace,
        spec=spec.model_copy(update={"memory": 128 * 1024**2}),
    )
    assert (env.exit_code, env.status) == (137, "oom_killed")
    assert "survived" not in env.stdout
    assert "memory limit 128 MiB" in env.headline()


def test_fork_storm_is_contained_by_the_pids_limit(docker_sandbox, workspace, spec, engine_here) -> None:
    if engine_here.limits_unenforced:
        return unenforced_and_said(docker_sandbox, workspace, spec, "pids")
    storm = """
        import os, time
        made = 0
        try:
            for _ in range(1000):
                if os.fork() == 0:
                    time.sleep(60)
                    os._exit(0)
                made += 1
        except OSError as error:
            print("blocked", made, error.errno)
    """
    started = time.monotonic()
    env = docker_sandbox.run(_py(storm), workspace=workspace, spec=spec.model_copy(update={"pids": 32}))
    words = env.stdout.split()
    assert words[0] == "blocked" and int(words[1]) < 32, env.render()
    assert env.exit_code == 0 and time.monotonic() - started < 20


@pytest.mark.parametrize("allowed", [None, "pypi"])
def test_no_network_at_all(docker_sandbox, workspace, spec, tmp_path, allowed) -> None:
    """The same probes, and the same nothing, when the session's egress proxy allows something else:
    the container still has only loopback (the relay listens there, and the proxy refuses these)."""
    probe = """
        import os, socket
        results = {}
        def attempt(name, fn):
            try:
                fn(); results[name] = "REACHED"
            except OSError as error:
                results[name] = "blocked"
        attempt("tcp", lambda: socket.create_connection(("192.0.2.1", 80), timeout=3))
        attempt("tcp-443", lambda: socket.create_connection(("192.0.2.2", 443), timeout=3))
        def udp():
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3)
            s.sendto(b"x", ("192.0.2.53", 53)); s.recv(10)
        attempt("udp", udp)
        attempt("dns", lambda: socket.getaddrinfo("pypi.org", 443))
        attempt("dns-invalid", lambda: socket.getaddrinfo("example.invalid", 443))
        def ipv6():
            s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM); s.settimeout(3)
            s.connect(("2001:db8::1", 80))
        attempt("ipv6", ipv6)
        print(sorted(results.items()), sorted(os.listdir("/sys/class/net")))
    """
    if allowed is None:
        env = docker_sandbox.run(_py(probe), workspace=workspace, spec=spec)
    else:
        from sandbox.network.egress import Egress

        with Egress([allowed], tmp_path / "network.jsonl") as egress:
            env = docker_sandbox.run(
                _py(probe), workspace=workspace, spec=spec.model_copy(update={"egress": str(egress.folder)})
            )
    assert env.exit_code == 0, env.render()
    assert "REACHED" not in env.stdout
    assert env.stdout.strip().endswith("['lo']")
    assert env.limits.network == ("none" if allowed is None else "egress")


def test_root_is_read_only_and_user_is_not_root(docker_sandbox, workspace, spec) -> None:
    script = "id -u; touch /usr/evil 2>&1 || echo ro-usr; touch /etc/evil 2>&1 || echo ro-etc; touch /tmp/ok && echo tmp-ok; echo $HOME"
    env = docker_sandbox.run(["sh", "-c", script], workspace=workspace, spec=spec)
    lines = env.stdout.splitlines()
    assert lines[0] != "0" and int(lines[0]) > 0
    assert "ro-usr" in lines and "ro-etc" in lines and "tmp-ok" in lines and lines[-1] == "/tmp"
    assert "Read-only file system" in env.stdout


def test_no_capability_allows_mount_or_raw_sockets(docker_sandbox, workspace, spec) -> None:
    probe = """
        import socket, subprocess
        caps = [l for l in open("/proc/self/status") if l.startswith(("CapEff", "CapPrm", "CapBnd"))]
        print(caps)
        print("nnp", [l.split()[1] for l in open("/proc/self/status") if l.startswith("NoNewPrivs")])
        print("seccomp", [l.split()[1] for l in open("/proc/self/status") if l.startswith("Seccomp:")])
        try:
            socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP); print("RAW-OK")
        except PermissionError:
            print("raw-denied")
        rc = subprocess.run(["mount", "-t", "tmpfs", "none", "/mnt"], capture_output=True).returncode
        print("mount-rc", rc)
    """
    env = docker_sandbox.run(_py(probe), workspace=workspace, spec=spec)
    assert "0000000000000000" in env.stdout and "Bnd:\\t0000000000000000" in env.stdout
    assert "raw-denied" in env.stdout and "RAW-OK" not in env.stdout
    assert "mount-rc 0" not in env.stdout and "mount-rc" in env.stdout
    assert "nnp ['1']" in env.stdout and "seccomp ['2']" in env.stdout


def test_output_flood_of_1gb_keeps_controller_memory_bounded(docker_sandbox, workspace, spec) -> None:
    me = psutil.Process()
    baseline = me.memory_info().rss
    peak = [baseline]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.05):
            peak[0] = max(peak[0], me.memory_info().rss)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        env = docker_sandbox.run(
            ["head", "-c", str(1024**3), "/dev/zero"],
            workspace=workspace,
            spec=spec.model_copy(update={"output_ceiling": 2 * 1024**3, "timeout_s": 120}),
        )
    finally:
        done.set()
        sampler.join()
    assert env.status == "ok" and env.stdout_bytes == 1024**3 and env.truncated
    assert env.stdout_dropped == 1024**3 - spec.stdout_cap
    assert peak[0] - baseline < 64 * 1024**2, f"controller RSS grew by {(peak[0] - baseline) >> 20} MiB"


def test_symlinks_to_host_paths_give_nothing_of_the_host(docker_sandbox, tmp_path, spec) -> None:
    (tmp_path / "host-secret.txt").write_text("HOST-SECRET-4711\n")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "etc").symlink_to("/etc")
    (repo / "up").symlink_to("..")
    (repo / "secret").symlink_to(tmp_path / "host-secret.txt")
    workspace = tmp_path / "ws"
    copy_repository(repo, workspace)
    script = "cat up/host-secret.txt secret etc/hostname 2>&1; ls up/; cat /etc/hostname"
    env = docker_sandbox.run(["sh", "-c", script], workspace=workspace, spec=spec)
    assert "HOST-SECRET" not in env.stdout + env.stderr
    assert os.uname().nodename not in env.stdout.splitlines()
    assert "host-secret.txt" not in env.stdout.splitlines()  # `ls up/` lists the container root


def _tree_digest(root: Path) -> str:
    sha = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        sha.update(f"{path.relative_to(root)}|{st.st_mode}|{st.st_uid}|{st.st_mtime_ns}".encode())
        if path.is_symlink():
            sha.update(os.readlink(path).encode())
        elif path.is_file():
            sha.update(path.read_bytes())
    return sha.hexdigest()


def test_original_repository_is_byte_for_byte_unchanged(docker_sandbox, tmp_path, spec) -> None:
    original = tmp_path / "original"
    shutil.copytree(Path(__file__).parents[3] / "examples" / "calc", original, symlinks=True)
    (original / "link").symlink_to("calc/ops.py")
    before = _tree_digest(original)
    workspace = tmp_path / "ws"
    copy_repository(original, workspace)
    env = docker_sandbox.run(
        ["sh", "-c", "echo pwned > link; rm -rf calc; echo x > new; chmod 000 tests"], workspace=workspace, spec=spec
    )
    assert env.exit_code == 0, env.render()
    assert _tree_digest(original) == before
    assert not (workspace / "calc").exists()


def test_pool_never_reuses_a_container(docker_sandbox, workspace, spec) -> None:
    script = f"cat /tmp/mark 2>/dev/null; echo {LAYER} > /tmp/mark; echo seen-by-{LAYER}"
    docker_sandbox.prewarm(workspace=workspace, spec=spec)
    docker_sandbox.pool.wait_idle()
    seen = []
    for _ in range(4):
        env = docker_sandbox.run(["sh", "-c", script], workspace=workspace, spec=spec)
        assert env.stdout.startswith("seen-by-"), env.render()
        seen.append(env.stdout.strip())
    assert len(set(seen)) == 4


def test_no_container_is_left_behind(docker_client, run_label, workspace, spec, test_label) -> None:
    box = DockerSandbox(docker_client, run_id=run_label, pool_size=2)
    box.prewarm(workspace=workspace, spec=spec)
    box.run(["true"], workspace=workspace, spec=spec)
    box.run(["sh", "-c", "sleep 30"], workspace=workspace, spec=spec.model_copy(update={"timeout_s": 1}))
    box.close()
    assert find_containers(docker_client, test_label) == []


def test_every_container_carries_the_labels(
    docker_sandbox, docker_client, run_label, workspace, spec, test_label
) -> None:
    docker_sandbox.prewarm(workspace=workspace, spec=spec)
    docker_sandbox.pool.wait_idle()
    docker_sandbox.run(["true"], workspace=workspace, spec=spec)
    docker_sandbox.pool.wait_idle()
    found = find_containers(docker_client, test_label)
    assert found
    echoed = (
        engine_kind(docker_client.version(), docker_client.info())[0] == "Docker"
    )  # (Podman's inspect leaves it out)
    for container in found:
        assert container.labels["harness.run"] == run_label
        assert container.labels["harness.pid"] == str(os.getpid())
        # no namespace holder on an engine that takes this machine's files; one per session on any other
        assert container.labels["harness.kind"] in (
            {"pool", "call", "netns"} if docker_sandbox.remote else {"pool", "call"}
        )
        host = container.attrs["HostConfig"]
        # Docker says ALL; Podman lists each capability it dropped (every one of its defaults)
        assert (host["CapDrop"] == ["ALL"] or {"CHOWN", "KILL", "SETUID", "NET_RAW"} <= set(host["CapDrop"])) and host[
            "ReadonlyRootfs"
        ]
        assert not host.get("CapAdd"), "nothing is added back"
        assert host["LogConfig"]["Type"] == "none" and host["Init"] is True
        assert "no-new-privileges" in host["SecurityOpt"]
        if docker_sandbox.remote:  # (rootless: the files travel as archives, the calls join the session's holder)
            assert host["NetworkMode"] == "none" or host["NetworkMode"].startswith("container:"), host["NetworkMode"]
            continue
        # a network namespace of its own, made by the runtime, not the engine: loopback only (test_netns looks inside)
        assert host["NetworkMode"] == "none" and (
            container.attrs["Config"].get("NetworkDisabled") is True or not echoed
        )
        [hosts] = [m for m in container.attrs["Mounts"] if m["Destination"] == "/etc/hosts"]
        assert hosts["RW"] is False


def test_writable_root_change_is_committed(docker_client, run_label, workspace, spec, test_label) -> None:
    writable = spec.model_copy(update={"read_only_root": False})
    session = f"s-{test_label['harness.test']}"
    with DockerSandbox(docker_client, run_id=run_label, pool_size=0, session_id=session) as box:
        unchanged = box.run(
            ["sh", "-c", "echo x > /tmp/a; echo y > /workspace/b"],
            workspace=workspace,
            spec=writable,
            commit_changes=True,
        )
        changed = box.run(
            ["sh", "-c", "echo x > /var/tmp/installed"], workspace=workspace, spec=writable, commit_changes=True
        )
    assert unchanged.committed_image is None
    assert changed.committed_image
    try:
        labels = docker_client.images.get(changed.committed_image).labels
    finally:  # remove at once: session tooling running concurrently lists images by harness.session
        # (never by force: Podman's would remove other sessions' containers using the parents it prunes;
        # there it may keep the image while another worker's session uses its parent: the session's end
        # removes it by label then)
        remove_image(docker_client, changed.committed_image)
    assert (
        labels["harness.run"] == run_label and labels["harness.kind"] == "step" and labels["harness.session"] == session
    )


def test_concurrent_calls_each_get_their_own_container(docker_sandbox, workspace, spec) -> None:
    from concurrent.futures import ThreadPoolExecutor

    def call(n: int) -> tuple[int, str]:
        env = docker_sandbox.run(["sh", "-c", f"echo {n} {LAYER}; exit {n}"], workspace=workspace, spec=spec)
        return env.exit_code, env.stdout

    with ThreadPoolExecutor(4) as workers:
        results = list(workers.map(call, range(1, 5)))
    assert [code for code, _ in results] == [1, 2, 3, 4]
    assert [out.split()[0] for _, out in results] == ["1", "2", "3", "4"]
    assert len({out.split()[1] for _, out in results}) == 4


def test_a_dead_warm_container_is_replaced_transparently(
    docker_sandbox, docker_client, workspace, spec, test_label
) -> None:
    docker_sandbox.prewarm(workspace=workspace, spec=spec)
    docker_sandbox.pool.wait_idle()
    for container in find_containers(docker_client, test_label):
        container.kill()
    env = docker_sandbox.run(["echo", "fine"], workspace=workspace, spec=spec)
    assert (env.exit_code, env.stdout) == (0, "fine\n")
