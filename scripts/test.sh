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

# Tests run tasks in-process; the worker tests start their own Redis. Celery lets an exported
# CELERY_BROKER_URL override its configuration, so it must not leak into the test process.
unset CELERY_BROKER_URL
export GPUPORTAL_REQUIRE_POSTGRES=1 GPUPORTAL_REQUIRE_KUBE=1 GPUPORTAL_REQUIRE_NVCHECK=1 GPUPORTAL_REQUIRE_PROMETHEUS=1
export GPUPORTAL_REQUIRE_LDAP=1  # the LDAP tests need slapd and python-ldap (make ldap); never skipped here
# The test database is created and migrated by the owner role (DATABASE_URL); the tests then run as
# the restricted application role (GPUPORTAL_APP_DATABASE_URL, see tests/conftest.py). The test
# runner's flush needs TRUNCATE on the ordinary tables, never on the audit tables.
export GPUPORTAL_DB_RUNTIME_GRANT_TRUNCATE=1

echo "== lint"
.venv/bin/ruff check .
.venv/bin/mypy
.venv/bin/python manage.py makemigrations --check --dry-run --settings=gpuportal.settings_test

echo "== deploy-check: the Helm charts (docs/deploy.md); the push as their ServiceAccount is tests/deploy, below"
export GPUPORTAL_REQUIRE_HELM=1
scripts/deploy-check.sh --charts-only

echo "== tests"
# Two kinds of tests run in processes of their own beside the rest, on the second core, their output
# printed after (tests/pure.py): those marked pure (no database, service or cluster), and those
# marked apart (the long fidelity and simulation runs, on PostgreSQL: on a test database of their
# own, test_gpuportal_apart). Exit status 5 is "no test selected" (the paths given hold none of one
# kind); the step fails if one fails, or if none of the three selected anything.
pure_log=$(mktemp)
apart_log=$(mktemp)
trap 'kill "${pure_pid:-}" "${apart_pid:-}" 2>/dev/null || true; scripts/services.sh down; rm -f "$env_file" "$pure_log" "$apart_log"' EXIT
.venv/bin/python -m pytest -q -p no:cacheprovider -m pure "$@" >"$pure_log" 2>&1 &
pure_pid=$!
DATABASE_URL="${DATABASE_URL%/*}/gpuportal_apart" GPUPORTAL_APP_DATABASE_URL="${GPUPORTAL_APP_DATABASE_URL%/*}/gpuportal_apart" \
  .venv/bin/python -m pytest -q -p no:cacheprovider -m apart "$@" >"$apart_log" 2>&1 &
apart_pid=$!
rest=0
.venv/bin/python -m pytest -q -p no:cacheprovider -m "not pure and not apart" "$@" || rest=$?
pure=0
wait "$pure_pid" || pure=$?
apart=0
wait "$apart_pid" || apart=$?
echo "== the tests marked pure, run beside the rest"
cat "$pure_log"
echo "== the tests marked apart, run beside the rest on a database of their own"
cat "$apart_log"
passed() { [ "$1" = 0 ] || [ "$1" = 5 ]; }
if ! passed "$rest" || ! passed "$pure" || ! passed "$apart" || [ "$rest$pure$apart" = 555 ]; then
  echo "tests failed: the rest exited $rest, the pure ones $pure, the apart ones $apart" >&2
  exit 1
fi

echo "== audit tamper tests, as the database owner"
# Playing an attacker who drops the append-only triggers needs the owner's connection, which the
# run above (as the application role) cannot use; the signed checkpoints must still catch it.
GPUPORTAL_TESTS_AS_OWNER=1 .venv/bin/python -m pytest -q -p no:cacheprovider tests/audit

echo "== the newest supported Python"
# make run's path with the runtime lock, then part of the suite with the development lock, on the
# newest of Python 3.11-3.13 found (docs/install.md); GPUPORTAL_NEWEST_PYTHON=0 skips it.
if [ "${GPUPORTAL_NEWEST_PYTHON:-1}" != 0 ]; then
  scripts/newest-python.sh
fi

echo "== API fuzzing: schemathesis against gunicorn, as the application role"
# Every operation of the OpenAPI schema, as several identities, on a database of its own next to
# the suite's (docs/security.md, "Fuzzing"); fails on any 5xx or answer the schema does not
# describe. GPUPORTAL_FUZZ=0 skips it.
if [ "${GPUPORTAL_FUZZ:-1}" != 0 ]; then
  scripts/fuzz.sh
fi
