#!/usr/bin/env bash
# infra/Dockerfile built with podman, on the base of base-image.sh: `build.sh [TAG]`
# (default $IMAGE). The pip-cert secret is this host's CA bundle, for a proxy that re-signs
# outbound TLS (pip reads it during the build; no layer keeps it).
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$PODMAN_DIR/../.."

tag="${1:-$IMAGE}"
secret=()
ca="${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}"
[[ -f "$ca" ]] && secret=(--secret "id=pip-cert,src=$ca")
start=$(date +%s)
podman build --format docker --network host --build-arg "BASE_IMAGE=$BASE_IMAGE" "${secret[@]}" \
  -f infra/Dockerfile -t "$tag" .
echo "built $tag in $(( $(date +%s) - start )) s: $(podman image inspect "$tag" --format '{{.Size}}') bytes"
