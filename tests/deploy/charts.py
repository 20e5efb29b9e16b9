"""Rendering the Helm charts of ``deploy/helm`` with the pinned helm (``make helm``), for the chart
tests. Without the binary the tests skip, unless ``GPUPORTAL_REQUIRE_HELM=1`` (``make test`` sets
it), in which case they fail so CI cannot silently skip (docs/deploy.md)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHARTS = ROOT / "deploy" / "helm"
PORTAL = CHARTS / "gpu-portal"
TARGET = CHARTS / "gpu-portal-target"
HELM_VERSION = "v3.22.0"  # tools/helm.mk
HELM_ENV = "GPUPORTAL_HELM"
REQUIRE_ENV = "GPUPORTAL_REQUIRE_HELM"


def helm_binary() -> Path:
    """The pinned helm, or a skip (a failure when the run must prove the charts)."""
    path = Path(os.environ.get(HELM_ENV) or ROOT / ".cache" / "helm" / HELM_VERSION / "bin" / "helm")
    if path.is_file() and os.access(path, os.X_OK):
        return path
    message = f"helm {HELM_VERSION} not found at {path}: build it with `make helm`"
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{message} (${REQUIRE_ENV} is set, so this is an error)", pytrace=False)
    pytest.skip(message)


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm_binary()), *args], capture_output=True, text=True, timeout=120, check=check)


def helm_against(kubeconfig: Path, home: Path, *args: str) -> subprocess.Popen[str]:
    """helm run against a cluster (``install``, ``upgrade``, ``uninstall``), its own state under ``home``."""
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    env.update({f"HELM_{kind}_HOME": str(home / kind.lower()) for kind in ("CACHE", "CONFIG", "DATA")})
    return subprocess.Popen([str(helm_binary()), *args, "--timeout", "120s"], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finished(process: subprocess.Popen[str]) -> str:
    out, err = process.communicate(timeout=150)
    assert process.returncode == 0, err
    return out


def render_text(chart: Path, *, release: str = "gp", namespace: str = "gpuportal", values: Iterable[Path] = (),
                sets: Iterable[str] = ()) -> str:
    argv = ["template", release, str(chart), "--namespace", namespace]
    for path in values:
        argv += ["--values", str(path)]
    for item in sets:
        argv += ["--set", item]
    result = helm(*argv, check=False)
    if result.returncode:
        raise AssertionError(f"helm template failed: {result.stderr}")
    return result.stdout


def render(chart: Path, **kwargs: Any) -> list[dict[str, Any]]:
    """The chart's objects (hooks included), as helm template renders them."""
    return [doc for doc in yaml.safe_load_all(render_text(chart, **kwargs)) if doc]


def value_sets(chart: Path) -> list[Path]:
    """The chart's own value sets (``ci/*-values.yaml``), which deploy-check renders and applies."""
    return sorted((chart / "ci").glob("*-values.yaml"))


def find(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    matches = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(matches) == 1, f"expected one {kind} {name or ''}, found {[o['metadata']['name'] for o in matches]}"
    return matches[0]
