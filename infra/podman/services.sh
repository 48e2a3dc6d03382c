#!/usr/bin/env bash
# The images of docker-compose.yml's other services, made here (services/Containerfile):
# $REDIS_IMAGE, $POSTGRES_IMAGE, $LIVEKIT_IMAGE. livekit-server is the binary of
# `make livekit-server` (python -m agent.ops.livekit_server --ensure prints its path).
set -euo pipefail
source "$(dirname "$0")/env.sh"
PYTHON="${PYTHON:-python3}"

context="$(mktemp -d)"
trap 'rm -rf "$context"' EXIT
cp "$PODMAN_DIR"/services/* "$context/"
cp "$(cd "$PODMAN_DIR/../.." && "$PYTHON" -m agent.ops.livekit_server --ensure | tail -1)" \
  "$context/livekit-server"
for target in redis postgres livekit; do
  var="${target^^}_IMAGE"
  podman build --format docker --network host --build-arg "BASE_IMAGE=$BASE_IMAGE" \
    --target "$target" -t "${!var}" "$context"
done
