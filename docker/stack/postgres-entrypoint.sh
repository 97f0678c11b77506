#!/bin/sh
# First start: a cluster whose superuser is POSTGRES_USER (scram password) and database POSTGRES_DB,
# as the upstream postgres image makes it; later starts reuse the volume. Runs as uid 70 with a
# read-only root: the socket and the password file live in the /tmp tmpfs.
set -eu
: "${POSTGRES_USER:?set POSTGRES_USER}" "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}"
DB="${POSTGRES_DB:-$POSTGRES_USER}"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  umask 077
  printf '%s' "$POSTGRES_PASSWORD" > /tmp/pwfile
  initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile=/tmp/pwfile --auth-local=trust --auth-host=scram-sha-256 \
    --encoding=UTF8 >/dev/null
  rm -f /tmp/pwfile
  echo "host all all 0.0.0.0/0 scram-sha-256" >> "$PGDATA/pg_hba.conf"
  if [ "$DB" != postgres ]; then
    echo "CREATE DATABASE \"$DB\";" | postgres --single -D "$PGDATA" -c unix_socket_directories=/tmp postgres >/dev/null
  fi
fi
exec postgres -D "$PGDATA" -c listen_addresses='*' -c unix_socket_directories=/tmp "$@"
