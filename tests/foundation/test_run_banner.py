"""make run's banner counts from when make began: the installing of the environment included."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# A stand-in for the venv's python: demo_prepare does nothing, runserver answers /readyz for a few
# seconds; anything else (the banner's poller) is the real interpreter.
FAKE_PYTHON = """#!/bin/sh
if [ "$1" = manage.py ] && [ "$2" = runserver ]; then
  exec {python} -c '
import http.server, sys, threading
host, port = sys.argv[1].rsplit(":", 1)
class Ready(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *args): pass
server = http.server.HTTPServer((host, int(port)), Ready)
threading.Timer(3, server.shutdown).start()
server.serve_forever()
' "$4"
fi
if [ "$1" = manage.py ]; then exit 0; fi
exec {python} "$@"
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_banner_counts_the_installing_make_did_before_the_script(tmp_path: Path) -> None:
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(FAKE_PYTHON.format(python=sys.executable))
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "VENV": str(tmp_path / "venv"), "PORT": str(_free_port()),
           "GPUPORTAL_RUN_STARTED": str(int(time.time()) - 20)}  # make began 20 s ago: venv-run installed meanwhile
    done = subprocess.run(["bash", "scripts/run.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    banner = [line for line in done.stdout.splitlines() if line.startswith("GPU Portal on ")]
    assert banner, done.stdout + done.stderr
    took = banner[0].split("(ready in ", 1)[1].split(")", 1)[0]
    seconds, installing = took.split(" s, ", 1)
    assert 20 <= int(seconds) <= 40 and installing in {"20 s of it installing", "21 s of it installing"}, took
