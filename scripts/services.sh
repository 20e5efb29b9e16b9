#!/usr/bin/env bash
# Install (from Debian, when missing) and start PostgreSQL and Redis on loopback for the test
# suite, or stop what an earlier "up" started.
#
#   scripts/services.sh up     prints the environment to export (DATABASE_URL, CELERY_BROKER_URL, ...)
#   scripts/services.sh down   stops both and removes their data
#
# State lives in var/test-services/state so that "down" finds what "up" started.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
state_dir="$root/var/test-services"
state_file="$state_dir/state"
pg_port=${GPUPORTAL_TEST_PG_PORT:-54329}
redis_port=${GPUPORTAL_TEST_REDIS_PORT:-63799}

log() { echo "services: $*" >&2; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    log "need root to run: $*"; exit 1; fi
}

pg_bindir() {
  local dir
  for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    [ -x "$dir/initdb" ] && { echo "$dir"; return 0; }
  done
  return 1
}

apt_updated=0
apt_install() {
  if [ "$apt_updated" -eq 0 ]; then as_root apt-get update -qq >&2; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "$@" >&2
}

ensure_installed() {
  pg_bindir >/dev/null || { log "installing PostgreSQL"; apt_install postgresql; }
  command -v redis-server >/dev/null || { log "installing Redis"; apt_install redis-server; }
}

# PostgreSQL refuses to run as root: run it as the postgres user when we are root.
run_pg() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

up() {
  ensure_installed
  if [ -f "$state_file" ]; then down; fi
  mkdir -p "$state_dir"
  local bindir pg_dir redis_dir
  bindir=$(pg_bindir)
  # A folder the postgres user can reach whatever the permissions of the checkout.
  pg_dir=$(mktemp -d "${TMPDIR:-/tmp}/gpuportal-pg.XXXXXX")
  redis_dir=$(mktemp -d "${TMPDIR:-/tmp}/gpuportal-redis.XXXXXX")
  chmod 755 "$pg_dir"
  if [ "$(id -u)" -eq 0 ]; then chown postgres:postgres "$pg_dir"; fi
  {
    echo "pg_bindir=$bindir"; echo "pg_dir=$pg_dir"; echo "redis_dir=$redis_dir"
    echo "redis_port=$redis_port"
  } >"$state_file"

  run_pg "$bindir/initdb" -D "$pg_dir/data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null
  run_pg "$bindir/pg_ctl" -D "$pg_dir/data" -l "$pg_dir/server.log" -w -t 60 \
    -o "-p $pg_port -k $pg_dir -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
    start >/dev/null
  psql_admin=("$bindir/psql" -h 127.0.0.1 -p "$pg_port" -U postgres -v ON_ERROR_STOP=1 -q)
  "${psql_admin[@]}" -d postgres <<SQL
CREATE ROLE gpuportal_owner LOGIN PASSWORD 'gpuportal_owner' CREATEDB CREATEROLE;
CREATE ROLE gpuportal_app LOGIN PASSWORD 'gpuportal_app';
CREATE DATABASE gpuportal OWNER gpuportal_owner;
SQL
  redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$redis_dir" --daemonize yes \
    --pidfile "$redis_dir/redis.pid" --logfile "$redis_dir/redis.log" --save "" --appendonly no >/dev/null
  for _ in $(seq 50); do
    redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break
    sleep 0.1
  done
  log "PostgreSQL on 127.0.0.1:$pg_port, Redis on 127.0.0.1:$redis_port"
  echo "export DATABASE_URL=postgres://gpuportal_owner:gpuportal_owner@127.0.0.1:$pg_port/gpuportal"
  echo "export GPUPORTAL_APP_DATABASE_URL=postgres://gpuportal_app:gpuportal_app@127.0.0.1:$pg_port/gpuportal"
  echo "export CELERY_BROKER_URL=redis://127.0.0.1:$redis_port/0"
  echo "export GPUPORTAL_TEST_REDIS_URL=redis://127.0.0.1:$redis_port/1"
}

down() {
  [ -f "$state_file" ] || return 0
  # shellcheck disable=SC1090
  . "$state_file"
  run_pg "$pg_bindir/pg_ctl" -D "$pg_dir/data" -m immediate stop >/dev/null 2>&1 || true
  redis-cli -p "$redis_port" shutdown nosave >/dev/null 2>&1 || true
  rm -rf "$pg_dir" "$redis_dir" "$state_file"
  log "stopped PostgreSQL and Redis"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
