# Sourced by the scripts beside it: podman with the settings of containers.conf beside it
# (runc, cgroupfs, no default ulimits), and the names of the images they make.
PODMAN_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$PODMAN_DIR/containers.conf}"
# The Debian release and Python of the public default base (python:3.11-slim-bookworm).
BASE_IMAGE="${BASE_IMAGE:-localhost/voxroom-base:bookworm}"
IMAGE="${IMAGE:-localhost/voxroom-agent:latest}"
# docker-compose.yml's other services, as services.sh makes them.
REDIS_IMAGE="${REDIS_IMAGE:-localhost/voxroom-redis:7}"
POSTGRES_IMAGE="${POSTGRES_IMAGE:-localhost/voxroom-postgres:15}"
LIVEKIT_IMAGE="${LIVEKIT_IMAGE:-localhost/livekit-server:v1.13.5}"
