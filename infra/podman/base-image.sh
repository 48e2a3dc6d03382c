#!/usr/bin/env bash
# The Dockerfile's base made from Debian's packages, for hosts that reach no image registry:
# bookworm (minbase) with its python3 (3.11) as `python`, the venv module and the CA
# certificates, as python:3.11-slim-bookworm has them; imported as $BASE_IMAGE.
# Made once; `--force` makes it again.
set -euo pipefail
source "$(dirname "$0")/env.sh"

if [[ "${1:-}" != --force ]] && podman image exists "$BASE_IMAGE"; then
  echo "$BASE_IMAGE exists (--force makes it again)"
  exit 0
fi
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SECURITY="${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# No manual pages, documentation (but the licences) or translations, and apt that keeps no
# downloaded package (base/docker-clean), as the slim images.
mmdebstrap --variant=minbase --include=python3,python3-venv,python-is-python3,ca-certificates \
  --customize-hook="copy-in $PODMAN_DIR/base/docker-clean /etc/apt/apt.conf.d" \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  bookworm "$work/base.tar" \
  "deb $MIRROR bookworm main" "deb $MIRROR bookworm-updates main" \
  "deb $SECURITY bookworm-security main"
# LANG as the python images set it: UTF-8 whatever the host's locale.
podman import --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' \
  "$work/base.tar" "$BASE_IMAGE"
