#!/usr/bin/env bash
# Rootful Podman behind its Docker-compatible socket, for harness (docs/scale.md, "Other engines").
# On Debian as root: installs Debian's podman and catatonit (the init process harness asks for), gives
# containers the open-file and process limits this service itself has (Podman's own defaults are above
# the hard limits some machines give their services, and then no container starts), starts
# `podman system service` on /run/podman/podman.sock, and prints the DOCKER_HOST to use. Idempotent:
# a socket that answers is left as it is; a containers.conf already there is never changed.
# With --rootless: the same service run by an unprivileged user of its own (harness-podman, with
# subordinate ids 200000-265535 and fuse-overlayfs storage), on /run/user/UID/podman/podman.sock.
# harness sends such an engine the workspace as archives (its containers' users are other ids here)
# and names the limits it cannot set (cgroup v1, or controllers not delegated) as unenforced.
set -euo pipefail

if [ "${1:-}" = "--rootless" ]; then
  exec bash "$(dirname "$0")/ensure-podman-rootless.sh"
fi

SOCKET=/run/podman/podman.sock
answers() { curl -sf --unix-socket "$SOCKET" http://podman/_ping >/dev/null 2>&1; }

if ! answers; then
  if [ "$(id -u)" != "0" ] || [ ! -f /etc/debian_version ]; then
    echo "error: no Podman socket answers at $SOCKET; run this as root on Debian so it can install and start one" >&2
    exit 1
  fi
  if ! command -v podman >/dev/null 2>&1 || [ ! -x /usr/libexec/podman/catatonit ]; then
    echo "setup: installing Debian's podman and catatonit" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq podman catatonit >/dev/null 2>&1 || { apt-get update -qq >/dev/null; apt-get install -y -qq podman catatonit >/dev/null; }
  fi
  start() {
    mkdir -p "$(dirname "$SOCKET")"
    cd "$(dirname "$SOCKET")"  # (conmon writes a file named `oom` into its folder when a container is OOM-killed)
    nohup podman system service --time=0 "unix://$SOCKET" >/var/log/harness-podman.log 2>&1 &
    echo $!
  }
  wait_answer() {
    for _ in $(seq 1 50); do answers && return 0; sleep 0.2; done
    echo "error: podman system service did not answer at $SOCKET (see /var/log/harness-podman.log)" >&2
    exit 1
  }
  pid=$(start); wait_answer
  if [ ! -e /etc/containers/containers.conf ]; then  # the service's own limits, read once it runs
    files=$(awk '/^Max open files/ {print $5}' "/proc/$pid/limits")
    processes=$(awk '/^Max processes/ {print $4}' "/proc/$pid/limits")
    mkdir -p /etc/containers
    printf '# written by harness scripts/ensure-podman.sh: the limits the Podman service runs with\n[containers]\ndefault_ulimits = ["nofile=%s:%s", "nproc=%s:%s"]\n' \
      "$files" "$files" "$processes" "$processes" > /etc/containers/containers.conf
    kill "$pid"; while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    pid=$(start); wait_answer
  fi
fi
# A machine whose firewall drops what it forwards (Docker sets the FORWARD policy to DROP) drops what
# the containers of one Podman network send each other too, when the network is internal (netavark
# adds no rule for such a network; its bridge carries it through the firewall all the same): harness's
# services network is one. Let each Podman bridge carry its own containers' traffic, as Docker lets
# docker0 carry its own, in DOCKER-USER where there is one (the chain Docker keeps for its users' rules).
if [ "$(id -u)" = "0" ] && command -v iptables >/dev/null 2>&1 && iptables -S FORWARD 2>/dev/null | grep -qx -- '-P FORWARD DROP'; then
  chain=FORWARD
  iptables -S DOCKER-USER >/dev/null 2>&1 && chain=DOCKER-USER
  rule=(-i podman+ -o podman+ -m comment --comment harness-podman -j ACCEPT)
  if ! iptables -C "$chain" "${rule[@]}" 2>/dev/null; then
    echo "setup: this machine's firewall drops forwarded traffic; letting each Podman bridge carry its own containers' ($chain)" >&2
    iptables -I "$chain" "${rule[@]}"
  fi
fi
echo "export DOCKER_HOST=unix://$SOCKET"
