#!/usr/bin/env bash
# make run: the portal on the embedded default (SQLite under var/, tasks in-process, the manifests
# driver, demo data). Prepares the database in one process (migrate, seed_demo: both do nothing the
# second time), starts Django's development server, and prints where the portal is only once it
# answers /readyz. Ctrl-C stops the server as usual. VENV, HOST and PORT come from the Makefile.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
HOST=${HOST:-127.0.0.1}
PORT=${PORT:-8000}
python="$VENV/bin/python"
export GPUPORTAL_DEBUG=${GPUPORTAL_DEBUG:-true}
# The demo cluster has no exporter or agent: the clock goes on writing its readings (demo/usage.py).
export GPUPORTAL_DEMO_READINGS=${GPUPORTAL_DEMO_READINGS:-true}

# GPUPORTAL_RUN_STARTED (seconds since the epoch, from the Makefile): when make began, before it
# installed the environment; the banner counts from then, and says how much of it was installing.
now=$(date +%s)
installing=$(( now - ${GPUPORTAL_RUN_STARTED:-$now} ))
(( installing >= 0 )) || installing=0
started=$SECONDS
"$python" manage.py demo_prepare

# The announcement waits in the background for the server's first answer; the server itself runs in
# the foreground, so Ctrl-C reaches it as it would without this script.
"$python" - "$HOST" "$PORT" "$$" "$((SECONDS - started))" "$installing" <<'EOF' &
import os, sys, time, urllib.error, urllib.request

host, port, parent, prepared, installing = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
url = f"http://{host}:{port}/"
begun = time.monotonic()
while True:
    try:
        os.kill(parent, 0)
    except OSError:
        sys.exit(0)  # make run ended before the server answered
    try:
        with urllib.request.urlopen(url + "readyz", timeout=2) as answer:
            problem = ""
    except urllib.error.HTTPError as error:  # 503: up, but something it needs is not
        problem = error.read().decode(errors="replace").strip()
    except OSError:
        time.sleep(0.2)
        continue
    break
took = f"ready in {installing + float(prepared) + time.monotonic() - begun:.0f} s"
if installing:
    took += f", {installing} s of it installing"
if problem:
    print(f"\nGPU Portal answers on {url} ({took}) but is not ready: {problem}\n", flush=True)
else:
    print(f"\nGPU Portal on {url} ({took}): users alice, bob, carol, dave, erin, admin, frank, password demo "
          "(unless GPUPORTAL_DEMO_PASSWORD says otherwise). Ctrl-C stops it.\n", flush=True)
EOF
announcer=$!
trap 'kill "$announcer" 2>/dev/null || true' EXIT

# The checks ran in demo_prepare; the autoreloader restarts the server when a source file changes.
"$python" manage.py runserver --skip-checks "$HOST:$PORT"
