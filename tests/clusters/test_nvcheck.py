"""Every device-plugin and mig-parted config the renderer produces, loaded by tools/nvcheck: for the
demo data and for generated inputs. nvcheck validates MIG profile names with NVIDIA's go-nvlib
parser and each config's structure strictly against the documented v1 fields."""

from __future__ import annotations

import datetime
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from delivery.node_configs import NodePlan, mig_plan, render_node_objects
from delivery.services import cluster_scope
from demo.seed import demo_seed

ROOT = Path(__file__).resolve().parents[2]
BINARY = ROOT / ".cache" / "nvcheck" / "nvcheck"
A100 = "NVIDIA-A100-SXM4-80GB"
H100 = "NVIDIA-H100-80GB-HBM3"


@pytest.fixture(scope="session")
def nvcheck() -> Path:
    """The checker, built with ``make -f tools/nvcheck.mk nvcheck`` when Go is there."""
    if not BINARY.exists() and shutil.which("go"):
        subprocess.run(["make", "-s", "-f", str(ROOT / "tools" / "nvcheck.mk"), "nvcheck"], cwd=ROOT, check=True,
                       capture_output=True, timeout=900)
    if not BINARY.exists():
        if os.environ.get("GPUPORTAL_REQUIRE_NVCHECK") == "1":
            pytest.fail("tools/nvcheck is not built and cannot be (no Go toolchain)")
        pytest.skip("tools/nvcheck is not built (make -f tools/nvcheck.mk nvcheck)")
    return BINARY


def run(nvcheck: Path, objects: list[dict[str, Any]], folder: Path) -> subprocess.CompletedProcess[str]:
    paths = []
    for obj in objects:
        if obj["kind"] == "ConfigMap":
            path = folder / f"{obj['metadata']['name']}.yaml"
            path.write_text(yaml.safe_dump(obj))
            paths.append(str(path))
    return subprocess.run([str(nvcheck), *paths], capture_output=True, text=True, timeout=60)


@pytest.mark.django_db
def test_nvidias_parsers_accept_the_configs_of_the_demo_data(nvcheck: Path, tmp_path: Path) -> None:
    from django.contrib.auth.models import User
    from django.utils import timezone

    from allocations.models import Allocation, AllocationState, Flavor, PriorityClass
    from clusters.models import Cluster, Node
    from tenants.models import Project

    demo_seed()
    cluster = Cluster.objects.get(name="demo")
    Node.objects.filter(name="a100-node-1").update(sharing="mig")
    Node.objects.filter(name="h100-node-1").update(sharing="mps", sharing_replicas=4)
    Node.objects.filter(name="h100-node-2").update(sharing="timeslice", sharing_replicas=2)
    now = timezone.now()
    for flavor, quantity in (("a100-mig-1g-10gb", 9), ("a100-mig-3g-40gb", 2)):
        Allocation.objects.create(
            project=Project.objects.get(slug="nlp-llm"), flavor=Flavor.objects.get(name=flavor), quantity=quantity,
            priority_class=PriorityClass.objects.get(name="gpu-standard"), cluster=cluster, starts_at=now,
            ends_at=now + datetime.timedelta(days=1),
            justification="demo", state=AllocationState.ACTIVE, requested_by=User.objects.get(username="alice"),
        )
    scope = cluster_scope(cluster=cluster)

    result = run(nvcheck, scope.objects, tmp_path)

    assert result.returncode == 0, result.stdout + result.stderr
    # exclusive, mig-mixed, mps-4, ts-2, mps-5 (the demo's second MPS node) + config.yaml
    assert "nvcheck: 6 config(s) accepted" in result.stdout


plans = st.builds(
    NodePlan,
    name=st.sampled_from(["n1", "n2", "n3"]),
    gpu_model=st.just(A100),
    gpu_count=st.integers(1, 8),
    gpu_memory_mib=st.just(81920),
    mig_capable=st.just(True),
    sharing=st.sampled_from(["exclusive", "timeslice", "mps", "mig"]),
    replicas=st.integers(2, 48),
).map(lambda plan: plan if plan.sharing in ("timeslice", "mps") else NodePlan(**{**plan.__dict__, "replicas": None}))
demands = st.dictionaries(st.sampled_from(["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]),
                          st.integers(0, 9), max_size=4)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(nodes=st.lists(plans, min_size=1, max_size=3, unique_by=lambda plan: plan.name), demand=demands)
def test_nvidias_parsers_accept_the_configs_of_generated_inputs(
    nvcheck: Path, tmp_path_factory: pytest.TempPathFactory, nodes: list[NodePlan], demand: dict[str, int]
) -> None:
    objects = render_node_objects(mig_plan(nodes, {A100: demand}), namespace="gpu-operator")
    result = run(nvcheck, objects, tmp_path_factory.mktemp("nv"))
    assert result.returncode == 0, result.stdout


def test_the_checker_refuses_what_nvidias_components_refuse(nvcheck: Path, tmp_path: Path) -> None:
    bad = [
        {"kind": "ConfigMap", "metadata": {"name": "plugin"}, "data": {
            "mps-mixed": "version: v1\nflags: {migStrategy: mixed}\nsharing: {mps: {resources: [{name: nvidia.com/gpu, replicas: 4}]}}\n",
            "one": "version: v1\nsharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 1}]}}\n",
            "typo": "version: v1\nflags: {migStrategy: none}\nsharing: {timeSlicng: {}}\n",
        }},
        {"kind": "ConfigMap", "metadata": {"name": "mig"}, "data": {"config.yaml": (
            "version: v1\nmig-configs:\n  x:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {'1g.10GB': 1}\n"
            "  z2:\n  - devices: [0]\n    mig-enabled: false\n    mig-devices: {'1g.10gb': 1}\n")}},
    ]
    result = run(nvcheck, bad, tmp_path)
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert "plugin/mps-mixed: using --mig-strategy=mixed is not supported with MPS" in lines
    assert "plugin/mps-mixed: using MPS requires --mps-root to be specified" in lines
    assert "plugin/one: timeSlicing: number of replicas must be >= 2" in lines
    assert any(line.startswith("plugin/typo: unmarshal error") and "timeSlicng" in line for line in lines)
    assert any(line.startswith("mig/config.yaml: x: invalid format for '1g.10GB'") for line in lines)
    assert "mig/config.yaml: z2: MIG devices included when 'mig-enabled' is false" in lines
