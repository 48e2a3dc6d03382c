#!/bin/sh
# As the public redis image: a password-less server answers other containers (protected mode
# off; it is reachable only on the compose network).
set -eu
if [ "${1:-}" = redis-server ]; then
  shift
  exec redis-server --protected-mode no "$@"
fi
exec "$@"
