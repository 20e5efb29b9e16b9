#!/usr/bin/env bash
# The whole suite as CI runs it: start PostgreSQL and Redis, lint, run every test against them and
# the real kube-apiserver, then stop what was started (also when something fails).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/services.sh down
env_file=$(mktemp)
trap 'scripts/services.sh down; rm -f "$env_file"' EXIT
scripts/services.sh up >"$env_file"
# shellcheck disable=SC1090
. "$env_file"

export GPUPORTAL_REQUIRE_POSTGRES=1 GPUPORTAL_REQUIRE_KUBE=1 GPUPORTAL_REQUIRE_NVCHECK=1

echo "== lint"
.venv/bin/ruff check .
.venv/bin/mypy
.venv/bin/python manage.py makemigrations --check --dry-run --settings=gpuportal.settings_test

echo "== tests"
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
