#!/usr/bin/env bash
# CI's run on the newest supported Python (make test runs the suite on .venv's, normally 3.11):
#   1. the runtime lock in a venv of its own: make run's path (scripts/run.sh) on a fresh SQLite
#      database, answered over HTTP: /livez, /readyz, a page, an API token and lists;
#   2. the development lock in the same venv: a short part of the suite (PYTEST_ARGS overrides it),
#      against whatever database the environment names (PostgreSQL under scripts/test.sh).
# Prints a skip line and exits 0 when no Python newer than .venv's is found. The venv stays in the
# git-ignored .cache (NEWEST_VENV overrides), so a second run installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

UV_VERSION=${UV_VERSION:-$(sed -n 's/^UV_VERSION := //p' Makefile)}
export UV_VERSION
python=$(scripts/find-python.sh --newest) || { echo "newest Python: none of 3.11-3.13 found, skipped"; exit 0; }
minor=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
current=$(.venv/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || echo none)
if [ "$minor" = "$current" ]; then
  echo "newest Python: $minor is the suite's own ($python); skipped"
  exit 0
fi
venv=${NEWEST_VENV:-.cache/venv-python$minor}
echo "newest Python: $minor ($python) in $venv"

var=$(mktemp -d)
log="$var/run.log"
server=""
cleanup() {
  if [ -n "$server" ]; then kill -TERM -- "-$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
  rm -rf "$var"
}
trap cleanup EXIT

# 1. make run's path with the runtime lock.
VENV=$venv PYTHON=$python scripts/venv.sh runtime
port=$("$venv/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# Its own process group, so that the cleanup stops the server and its autoreloader's child.
(
  unset DATABASE_URL CELERY_BROKER_URL GPUPORTAL_CACHE_URL
  export GPUPORTAL_VAR_DIR="$var"
  exec setsid env VENV="$venv" PORT="$port" scripts/run.sh
) >"$log" 2>&1 </dev/null &
server=$!
for _ in $(seq 1 600); do
  grep -q "GPU Portal on http://127.0.0.1:$port/" "$log" && break
  kill -0 "$server" 2>/dev/null || { cat "$log"; echo "newest Python: make run's server ended early" >&2; exit 1; }
  sleep 0.5
done
grep -q "GPU Portal on" "$log" || { cat "$log"; echo "newest Python: no answer within 300 s" >&2; exit 1; }
grep "GPU Portal on" "$log"
"$venv/bin/python" - "$port" <<'EOF'
import json, sys, urllib.request

base = f"http://127.0.0.1:{sys.argv[1]}"


def get(path: str, token: str = "") -> tuple[int, bytes]:
    request = urllib.request.Request(base + path, headers={"Authorization": f"Token {token}"} if token else {})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return answer.status, answer.read()


assert get("/livez")[0] == 200
assert get("/readyz")[0] == 200
assert b"<form" in get("/login/")[1]
body = json.dumps({"username": "alice", "password": "demo"}).encode()
request = urllib.request.Request(base + "/api/v1/auth/token/", data=body, headers={"Content-Type": "application/json"})
with urllib.request.urlopen(request, timeout=30) as answer:
    token = json.load(answer)["token"]
flavors = json.loads(get("/api/v1/flavors/", token)[1])["results"]
mine = json.loads(get("/api/v1/allocations/?mine=true", token)[1])["results"]
assert len(flavors) >= 7 and len(mine) >= 5, (len(flavors), len(mine))
print(f"newest Python: make run answers ({len(flavors)} flavors, {len(mine)} of alice's allocations)")
EOF
cleanup
server=""

# 2. The development lock and a part of the suite.
VENV=$venv PYTHON=$python scripts/venv.sh dev
read -r -a args <<<"${PYTEST_ARGS:-tests/demo tests/foundation/test_api_basics.py tests/foundation/test_workflow.py tests/foundation/test_locks.py tests/foundation/test_quantity.py tests/architecture}"
"$venv/bin/python" -m pytest -q -p no:cacheprovider "${args[@]}"
