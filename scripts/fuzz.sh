#!/usr/bin/env bash
# The API fuzz step of `make test` (scripts/test.sh runs it last): schemathesis against the app
# served by gunicorn on PostgreSQL as the application role, every operation, several identities
# (tests/fuzz/run.py; docs/security.md, "Fuzzing"). Fails on any 5xx and on any answer the OpenAPI
# schema does not describe.
#
#   scripts/fuzz.sh [--max-examples N] [--seed S] [--identity NAME ...] [--keep DIR]
#
# Uses DATABASE_URL (the owner) and GPUPORTAL_APP_DATABASE_URL (the application role) of
# scripts/services.sh when they are set; otherwise starts the services itself and stops them after.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${GPUPORTAL_APP_DATABASE_URL:-}" ]; then
  env_file=$(mktemp)
  trap 'scripts/services.sh down; rm -f "$env_file"' EXIT
  scripts/services.sh up >"$env_file"
  # shellcheck disable=SC1090
  . "$env_file"
fi
# Tasks run in-process, as in the test suite.
unset CELERY_BROKER_URL
.venv/bin/python -m tests.fuzz.run "$@"
