#!/bin/sh
# What the public postgres image does with the variables compose sets: on first start a
# cluster in $PGDATA whose superuser is POSTGRES_USER (password POSTGRES_PASSWORD, required
# over the network) with the database POSTGRES_DB; then the server, as user postgres, in the
# foreground.
set -eu
: "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD is required}"
user="${POSTGRES_USER:-postgres}"
db="${POSTGRES_DB:-$user}"
as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups -- "$@"; }

if [ ! -s "$PGDATA/PG_VERSION" ]; then
  mkdir -p "$PGDATA"
  chown postgres:postgres "$PGDATA"
  chmod 700 "$PGDATA"
  pwfile="$(mktemp)"
  printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
  chown postgres "$pwfile"
  as_postgres initdb -D "$PGDATA" -U "$user" --pwfile="$pwfile" -E UTF8 \
    --auth-local=trust --auth-host=scram-sha-256
  rm -f "$pwfile"
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  if [ "$db" != postgres ]; then
    as_postgres pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start
    as_postgres createdb -U "$user" "$db"
    as_postgres pg_ctl -D "$PGDATA" -m fast -w stop
  fi
fi
exec setpriv --reuid=postgres --regid=postgres --init-groups -- \
  postgres -D "$PGDATA" -c listen_addresses='*' "$@"
