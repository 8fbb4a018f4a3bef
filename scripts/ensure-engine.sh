#!/usr/bin/env bash
# Make sure a Docker engine answers. On Debian as root with none answering, install Debian's engine
# package and start dockerd in the background. Idempotent: returns at once when an engine answers.
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

if ! pgrep -x dockerd >/dev/null 2>&1; then
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
