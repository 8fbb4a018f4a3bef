#!/usr/bin/env bash
# Copy harness's images from the default engine to another one (its address as the argument, the
# DOCKER_HOST a `make podman*` printed), so that the other engine does not bootstrap a base of its own:
# `docker save` of the base, sandbox and py311 images here, `docker load` there of those it lacks.
set -euo pipefail

target=${1:?usage: copy-images.sh DOCKER_HOST}
here() { env -u DOCKER_HOST docker "$@"; }
there() { docker -H "$target" "$@"; }

refs=$(here images --format '{{.Repository}}:{{.Tag}}' | grep -E '^harness/(base|sandbox|py311):' || true)
if [ -z "$refs" ]; then
  echo "error: the default engine has no harness images to copy (make images-demo first)" >&2
  exit 1
fi
missing=()
for ref in $refs; do
  there image inspect "$ref" >/dev/null 2>&1 || there image inspect "localhost/$ref" >/dev/null 2>&1 || missing+=("$ref")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: copying ${#missing[@]} image(s) to $target" >&2
  here save "${missing[@]}" | there load -q >/dev/null
fi
