"""The launcher cleans up after itself and the plugin skips or fails clearly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kube_testenv import ClusterOptions, KubeTestCluster
from kube_testenv.paths import REPO_ROOT

_PROBE_TEST = "def test_needs_cluster(kube_cluster):\n    assert kube_cluster.server\n"


def _run_probe(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run a one-test pytest session that uses ``kube_cluster`` with *env*."""
    (tmp_path / "test_probe.py").write_text(_PROBE_TEST)
    environment = dict(os.environ)
    environment.pop("GPUPORTAL_REQUIRE_KUBE", None)
    environment["GPUPORTAL_KUBE_BIN"] = str(tmp_path / "no-bin")
    # Only our plugin: faster, and independent of other installed plugins.
    environment["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    environment.update(env)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "kube_testenv.pytest_plugin",
            "-p",
            "no:cacheprovider",
            "-rsE",
            str(tmp_path / "test_probe.py"),
        ],
        check=False,
        cwd=REPO_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_missing_binaries_skip_kube_tests_with_build_hint(tmp_path: Path) -> None:
    result = _run_probe(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 skipped" in result.stdout
    assert "make kube-testenv" in result.stdout


def test_missing_binaries_fail_when_kube_is_required(tmp_path: Path) -> None:
    result = _run_probe(tmp_path, GPUPORTAL_REQUIRE_KUBE="1")
    assert result.returncode != 0
    assert "1 error" in result.stdout
    assert "GPUPORTAL_REQUIRE_KUBE" in result.stdout


def test_cluster_stops_processes_and_removes_data_when_the_body_fails(
    kube_cluster: KubeTestCluster,
) -> None:
    options = ClusterOptions(controller_manager=False, scheduler=False)
    cluster = KubeTestCluster(kube_cluster.binaries, options)
    with pytest.raises(RuntimeError, match="boom"), cluster:
        data_dir = cluster.data_dir
        pids = cluster.pids
        assert data_dir.is_dir() and len(pids) == 2
        raise RuntimeError("boom")

    assert not data_dir.exists()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
