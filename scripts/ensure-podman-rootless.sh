#!/usr/bin/env bash
# Rootless Podman for harness (docs/scale.md, "Other engines"): as root on Debian, installs podman,
# catatonit, uidmap and fuse-overlayfs, makes an unprivileged user of its own (harness-podman) with
# subordinate ids, gives it fuse-overlayfs storage, starts `podman system service` as that user on
# /run/user/UID/podman/podman.sock, and prints the DOCKER_HOST to use. Idempotent: a socket that
# answers is left as it is.
set -euo pipefail

USER_NAME=harness-podman
HOME_DIR=/var/lib/harness-podman
SUBIDS=200000:65536
NETWORKS=/var/tmp/harness-podman-networks

if [ "$(id -u)" != "0" ] || [ ! -f /etc/debian_version ]; then
  echo "error: run this as root on Debian: it makes the rootless engine's own user" >&2
  exit 1
fi
if ! id "$USER_NAME" >/dev/null 2>&1; then
  useradd --system --create-home --home-dir "$HOME_DIR" --shell /usr/sbin/nologin "$USER_NAME"
fi
uid=$(id -u "$USER_NAME")
SOCKET=/run/user/$uid/podman/podman.sock
answers() { curl -sf --unix-socket "$SOCKET" http://podman/_ping >/dev/null 2>&1; }
mkdir -p "$HOME_DIR/.config/containers"
if ! grep -q '^network_config_dir' "$HOME_DIR/.config/containers/containers.conf" 2>/dev/null; then
  # Networks' files outside /var/lib: Podman 4.3 sets up a rootless container's network from a namespace
  # where the user's graphroot under /var/lib is not seen, and every network it made was "not found"
  printf '[network]\nnetwork_config_dir = "%s"\n' "$NETWORKS" >> "$HOME_DIR/.config/containers/containers.conf"
  chown -R "$USER_NAME:" "$HOME_DIR/.config"
  if answers; then  # a service started before: it reads containers.conf as it starts
    echo "setup: restarting the rootless podman service (its networks' folder moved)" >&2
    pkill -u "$USER_NAME" -f "podman system service" || true
    for _ in $(seq 1 50); do answers || break; sleep 0.2; done
  fi
fi
# The devices a rootless engine opens as its user: FUSE for its storage (fuse-overlayfs), TUN for its
# networks (slirp4netns). Debian's udev rules make both every user's (0666); some machines make them
# root's alone, and then every container fails to mount ("fuse: failed to open /dev/fuse: Permission
# denied"), or the first one on a network fails to start slirp4netns (and wedges the networks: below).
for device in /dev/fuse /dev/net/tun; do
  if [ ! -c "$device" ]; then
    echo "error: this machine has no $device, which rootless Podman needs (storage: /dev/fuse; networks: /dev/net/tun)" >&2
    exit 1
  fi
  if ! runuser -u "$USER_NAME" -- test -r "$device" -a -w "$device"; then
    echo "setup: letting every user open $device (mode 0666, as Debian's udev rules make it)" >&2
    chmod 0666 "$device"
  fi
done
# A rootless network namespace without its folder: Podman 4.3 leaves the namespace's file behind when
# its slirp4netns failed to start (no access to /dev/net/tun), and every container on a network then
# fails ("failed to mount runtime directory for rootless netns"), the service restarted or not. The
# file is stale (nothing can run in it): removed, so that Podman makes the namespace anew.
runtime=/run/user/$uid
for stale in "$runtime"/netns/rootless-netns-*; do
  if [ -e "$stale" ] && [ ! -d "$runtime/libpod/tmp/rootless-netns/run" ]; then
    echo "setup: removing the rootless engine's stale network namespace ($stale)" >&2
    umount "$stale" 2>/dev/null || true
    rm -f "$stale"
    rm -rf "$runtime/libpod/tmp/rootless-netns"
  fi
done
mkdir -p "$NETWORKS" && chown "$USER_NAME:" "$NETWORKS" && chmod 700 "$NETWORKS"
if answers; then
  echo "export DOCKER_HOST=unix://$SOCKET"
  exit 0
fi
missing=""
for tool in podman newuidmap fuse-overlayfs; do command -v "$tool" >/dev/null 2>&1 || missing=1; done
[ -x /usr/libexec/podman/catatonit ] || missing=1
if [ -n "$missing" ]; then
  echo "setup: installing Debian's podman, catatonit, uidmap and fuse-overlayfs" >&2
  export DEBIAN_FRONTEND=noninteractive
  packages="podman catatonit uidmap fuse-overlayfs"
  apt-get install -y -qq $packages >/dev/null 2>&1 || { apt-get update -qq >/dev/null; apt-get install -y -qq $packages >/dev/null; }
fi
for file in /etc/subuid /etc/subgid; do
  grep -q "^$USER_NAME:" "$file" 2>/dev/null || echo "$USER_NAME:$SUBIDS" >> "$file"
done
mkdir -p "/run/user/$uid/podman" "$HOME_DIR/.config/containers"
chown "$USER_NAME:" "/run/user/$uid" "/run/user/$uid/podman" && chmod 700 "/run/user/$uid"
if ! grep -q '^runroot' "$HOME_DIR/.config/containers/storage.conf" 2>/dev/null; then
  # overlay through FUSE (vfs copies every layer per container); runroot and graphroot spelled out:
  # without them Podman 4.3's service fails every commit ("runroot must be set") though its CLI works
  printf '[storage]\ndriver = "overlay"\nrunroot = "/run/user/%s/containers"\ngraphroot = "%s/.local/share/containers/storage"\n[storage.options.overlay]\nmount_program = "/usr/bin/fuse-overlayfs"\n' \
    "$uid" "$HOME_DIR" > "$HOME_DIR/.config/containers/storage.conf"
fi
chown -R "$USER_NAME:" "$HOME_DIR/.config"
as_user() { (cd "$HOME_DIR" && runuser -u "$USER_NAME" -- env XDG_RUNTIME_DIR="/run/user/$uid" HOME="$HOME_DIR" "$@"); }
nohup runuser -u "$USER_NAME" -- env XDG_RUNTIME_DIR="/run/user/$uid" HOME="$HOME_DIR" \
  sh -c "cd '$HOME_DIR' && exec podman system service --time=0 unix://$SOCKET" >/var/log/harness-podman-rootless.log 2>&1 &
for _ in $(seq 1 50); do answers && break; sleep 0.2; done
if ! answers; then
  echo "error: the rootless podman service did not answer at $SOCKET (see /var/log/harness-podman-rootless.log)" >&2
  exit 1
fi
as_user podman info --format 'setup: rootless podman {{.Version.Version}}, cgroups {{.Host.CgroupsVersion}}, storage {{.Store.GraphDriverName}}' >&2 2>/dev/null || true
echo "export DOCKER_HOST=unix://$SOCKET"
