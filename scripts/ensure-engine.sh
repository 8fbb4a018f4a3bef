#!/usr/bin/env bash
# Make sure a Docker engine answers. On Debian as root with none answering, install Debian's engine
# package and start dockerd in the background. Idempotent: returns at once when an engine answers.
# An engine this script starts also gets gVisor (`--runtime runsc`) installed and registered, with the
# runtime arguments it needs on cgroup-v1 hosts; an engine that already answers is never reconfigured.
set -euo pipefail

engine_answers() { docker info >/dev/null 2>&1; }

if engine_answers; then exit 0; fi

if [ "$(id -u)" != "0" ] || [ ! -f /etc/debian_version ]; then
  echo "error: no Docker engine answers. Start one (e.g. 'sudo systemctl start docker') or run this as root on Debian so it can install one." >&2
  exit 1
fi

if ! command -v dockerd >/dev/null 2>&1; then
  echo "setup: installing Debian's docker.io engine package" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq docker.io >/dev/null
fi

register_gvisor() {
  if ! command -v runsc >/dev/null 2>&1; then
    echo "setup: installing gVisor (runsc)" >&2
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -qq runsc >/dev/null 2>&1; then
      apt-get update -qq >/dev/null 2>&1 || true
      apt-get install -y -qq runsc >/dev/null 2>&1 || { echo "setup: runsc is not installable here; --runtime runsc stays unavailable" >&2; return 0; }
    fi
  fi
  mkdir -p /etc/docker
  python3 - "$(command -v runsc)" <<'PY'
import json, pathlib, sys
path = pathlib.Path("/etc/docker/daemon.json")
text = path.read_text() if path.exists() else ""
config = json.loads(text) if text.strip() else {}
runtimes = config.setdefault("runtimes", {})
# --oci-seccomp: gVisor loads the calls' seccomp profile (the one that refuses device nodes)
# --host-uds=open: a call may connect to a Unix socket bound into it (its session's egress proxy,
# --allow-net); it can make none on the host
wanted = ["--network=none", "--ignore-cgroups", "--oci-seccomp", "--host-uds=open"]
if "runsc" not in runtimes:
    runtimes["runsc"] = {"path": sys.argv[1], "runtimeArgs": wanted}
    path.write_text(json.dumps(config, indent=2) + "\n")
    print("setup: registered runsc in /etc/docker/daemon.json", file=sys.stderr)
else:
    args = runtimes["runsc"].setdefault("runtimeArgs", [])
    missing = [arg for arg in wanted[2:] if arg not in args]
    if missing:
        args.extend(missing)
        path.write_text(json.dumps(config, indent=2) + "\n")
        print(f"setup: runsc registered with {' '.join(missing)} too", file=sys.stderr)
PY
}

if ! pgrep -x dockerd >/dev/null 2>&1; then
  register_gvisor
  echo "setup: starting dockerd" >&2
  mkdir -p /var/log
  nohup dockerd >/var/log/harness-dockerd.log 2>&1 &
fi

for _ in $(seq 1 60); do
  if engine_answers; then exit 0; fi
  sleep 1
done
echo "error: dockerd did not answer within 60 s; see /var/log/harness-dockerd.log" >&2
exit 1
