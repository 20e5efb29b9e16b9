"""The manifests driver: one file per object, stable content, untouched on resync, pruned."""

from __future__ import annotations

from pathlib import Path

from delivery.drivers.manifests import ManifestsDriver
from delivery.rendering import GrantedUnits, ProjectState, render_project


def state(*grants: GrantedUnits) -> ProjectState:
    return ProjectState(cluster="c1", namespace="team-a", department="nlp", project="team-a", grants=grants)


def test_it_writes_one_file_per_object_and_nothing_on_resync(tmp_path: Path) -> None:
    driver = ManifestsDriver(root=tmp_path, cluster="c1")
    objects = render_project(state(GrantedUnits("nvidia.com/gpu", 2, 8000, 65536)))
    first = driver.apply_project(namespace="team-a", objects=objects)
    folder = tmp_path / "c1" / "namespaces" / "team-a"
    assert sorted(path.name for path in folder.iterdir()) == [
        "limitrange-gpuportal-defaults.yaml", "namespace-team-a.yaml", "networkpolicy-gpuportal-tenant-isolation.yaml",
        "resourcequota-gpuportal-gpu-quota.yaml",
    ]
    assert (first.applied, first.unchanged, first.pruned) == (4, 0, 0)
    stamp = (folder / "namespace-team-a.yaml").stat().st_mtime_ns

    again = driver.apply_project(namespace="team-a", objects=objects)
    assert (again.applied, again.unchanged, again.pruned) == (0, 4, 0)
    assert (folder / "namespace-team-a.yaml").stat().st_mtime_ns == stamp


def test_it_renders_gpu_requests_and_cpu_memory_requests_and_limits(tmp_path: Path) -> None:
    objects = render_project(state(GrantedUnits("nvidia.com/gpu", 2, 8000, 1024), GrantedUnits("nvidia.com/gpu", 1, 8000, 1024)))
    hard = objects[1]["spec"]["hard"]
    assert hard == {
        "requests.nvidia.com/gpu": "3", "requests.cpu": "24000m", "requests.memory": "3072Mi",
        "limits.cpu": "24000m", "limits.memory": "3072Mi",
    }
    assert not any(key.startswith("limits.nvidia.com/") for key in hard)  # not enforced for extended resources
    driver = ManifestsDriver(root=tmp_path, cluster="c1")
    driver.apply_project(namespace="team-a", objects=objects)
    written = (tmp_path / "c1" / "namespaces" / "team-a" / "limitrange-gpuportal-defaults.yaml").read_text()
    assert "max:" in written and "default:" in written and "defaultRequest:" in written


def test_it_prunes_the_project_folder_when_nothing_is_granted(tmp_path: Path) -> None:
    driver = ManifestsDriver(root=tmp_path, cluster="c1")
    driver.apply_project(namespace="team-a", objects=render_project(state(GrantedUnits("nvidia.com/gpu", 1, 1, 1))))
    result = driver.apply_project(namespace="team-a", objects=render_project(state()))
    assert result.pruned == 4
    assert not (tmp_path / "c1" / "namespaces" / "team-a").exists()
