"""The committed PodResources stubs are upstream's proto and what grpcio-tools makes of it."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGE = REPO_ROOT / "agent" / "podresources"


def _stubs_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("podresources_stubs", REPO_ROOT / "scripts" / "podresources_stubs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_stubs_match_the_committed_proto(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools", reason="grpcio-tools is a dev dependency (make venv)")
    stubs = _stubs_script()

    generated = stubs.generate(PACKAGE / "api.proto", tmp_path)

    assert stubs.differing(generated, PACKAGE) == []


def test_a_changed_proto_is_noticed(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools", reason="grpcio-tools is a dev dependency (make venv)")
    stubs = _stubs_script()
    edited = tmp_path / "api.proto"
    text = (PACKAGE / "api.proto").read_text(encoding="utf-8")
    edited.write_text(text.replace("string claim_name = 2;", "string claim_name = 2;\n    string extra = 9;"))

    generated = stubs.generate(edited, tmp_path / "out")

    assert stubs.differing(generated, PACKAGE) == ["api.proto", "api_pb2.py"]


def test_the_committed_proto_is_upstreams_at_the_pinned_version() -> None:
    """Checked against the Go module cache; the download goes through the module proxy if needed."""
    if shutil.which("go") is None:
        pytest.skip("no Go toolchain to locate k8s.io/kubelet in the module cache")
    stubs = _stubs_script()
    try:
        upstream = stubs.upstream_proto()
    except subprocess.CalledProcessError as exc:  # offline with a cold module cache
        pytest.skip(f"go mod download {stubs.KUBELET_MODULE} failed: {exc.stderr.strip()[:200]}")
    assert upstream.read_bytes() == (PACKAGE / "api.proto").read_bytes()


def test_the_stubs_speak_the_kubelets_service_name() -> None:
    from agent.podresources import api_pb2

    service = api_pb2.DESCRIPTOR.services_by_name["PodResourcesLister"]
    assert service.full_name == "v1.PodResourcesLister"
    assert [method.name for method in service.methods] == ["List", "GetAllocatableResources", "Get"]
