#!/usr/bin/env bash
# Make sure Debian's chromium and its driver are installed (the HTML report tests drive them
# headless). Idempotent: returns at once when both are on PATH. Installs only as root on Debian.
set -euo pipefail

if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then exit 0; fi

if [ "$(id -u)" != "0" ] || [ ! -f /etc/debian_version ]; then
  echo "error: chromium and chromedriver are missing. Install them (Debian: 'apt-get install chromium chromium-driver') or run this as root on Debian so it can." >&2
  exit 1
fi

echo "setup: installing Debian's chromium and chromium-driver" >&2
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y -qq chromium chromium-driver >/dev/null 2>&1; then
  apt-get update -qq >/dev/null
  apt-get install -y -qq chromium chromium-driver >/dev/null
fi
