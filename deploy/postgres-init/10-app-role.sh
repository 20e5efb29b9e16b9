#!/bin/sh
# Runs once, when the PostgreSQL volume is first initialised: the restricted role the web, worker
# and beat processes use. Migrations run as the owner and grant it what it may do (docs/audit.md).
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" <<SQL
CREATE ROLE gpuportal_app LOGIN PASSWORD '${GPUPORTAL_APP_DB_PASSWORD}';
SQL
