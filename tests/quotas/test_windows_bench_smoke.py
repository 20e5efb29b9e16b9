"""``bench/quota_windows.py --quick`` runs end to end (pure evaluation, then the real tick on a
throw-away SQLite database) and prints its figures. Not timed: the figures are the benchmark's."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_quota_windows_benchmark_runs_in_quick_mode_and_prints_every_figure() -> None:
    done = subprocess.run([sys.executable, str(REPO / "bench" / "quota_windows.py"), "--quick"], cwd=REPO,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith("command: ") and "bench/quota_windows.py --quick" in out.splitlines()[0]
    assert "30 departments, 90 windows" in out
    for pattern in (r"effective\(\): [\d,]+ evaluations/s", r"lowest\(\) over one day: [\d,]+/s",
                    r"edges\(\) over one minute for all 30 quotas: [\d.]+ ms warm",
                    r"quiet tick [\d.]+ ms median", r"tick with 10 edges due: \d+ ms"):
        assert re.search(pattern, out), (pattern, out)
