"""Pure rendering: project objects, priority quotas, HAMi keys, queues and node GPU configs."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from delivery.node_configs import (
    MigGroup,
    NodePlan,
    RenderError,
    check_node_sharing,
    device_plugin_config,
    mig_fits,
    mig_plan,
    render_mig_parted_document,
    render_node_objects,
)
from delivery.rendering import (
    DepartmentQueue,
    GrantedUnits,
    ProjectState,
    queue_violations,
    render_project,
    render_queue,
)
from placement.mig import GEOMETRIES


def state(*grants: GrantedUnits, **extra: object) -> ProjectState:
    return ProjectState(cluster="c", namespace="p", department="nlp", project="p", grants=grants, **extra)  # type: ignore[arg-type]


def by_name(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return {f"{o['kind']}/{o['metadata']['name']}": o for o in objects}


def test_it_renders_priority_scoped_quotas_and_a_zero_quota_for_other_classes() -> None:
    objects = by_name(render_project(state(
        GrantedUnits("nvidia.com/gpu", 2, 8000, 1024, priority_class="high"),
        GrantedUnits("nvidia.com/gpu", 1, 8000, 1024, priority_class="low"),
        GrantedUnits("nvidia.com/mig-1g.10gb", 3, 2000, 1024, priority_class="low"),
    )))
    assert objects["ResourceQuota/gpuportal-priority-high"]["spec"] == {
        "hard": {"requests.nvidia.com/gpu": "2"},
        "scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]},
    }
    other = objects["ResourceQuota/gpuportal-priority-other"]["spec"]
    assert other["hard"] == {"requests.nvidia.com/gpu": "0", "requests.nvidia.com/mig-1g.10gb": "0"}
    assert other["scopeSelector"]["matchExpressions"][0]["values"] == ["high", "low"]
    hard = objects["ResourceQuota/gpuportal-gpu-quota"]["spec"]["hard"]
    assert not any(key.startswith("limits.nvidia.com/") for key in hard)  # no HAMi: never limits of a GPU
    assert (hard["limits.cpu"], hard["limits.memory"]) == (hard["requests.cpu"], hard["requests.memory"]) == ("30000m", "6144Mi")


def test_it_adds_hamis_own_limit_keys_only_where_hami_enforces_them() -> None:
    hard = render_project(state(
        GrantedUnits("nvidia.com/gpu", 2, 1000, 1024, hami_memory_mib=10240, hami_cores=20),
        GrantedUnits("nvidia.com/gpu", 1, 1000, 1024, hami_memory_mib=81920, hami_cores=100),
    ))[1]["spec"]["hard"]
    assert hard["limits.nvidia.com/gpumem"] == str(2 * 10240 + 81920)
    assert hard["limits.nvidia.com/gpucores"] == "140"
    assert hard["requests.nvidia.com/gpu"] == "3"


def test_it_binds_members_to_edit_and_admins_to_view_and_skips_empty_bindings() -> None:
    objects = by_name(render_project(state(GrantedUnits("nvidia.com/gpu", 1, 1, 1), editors=("ann",), viewers=("bob", "amy"))))
    assert [s["name"] for s in objects["RoleBinding/gpuportal-members-edit"]["subjects"]] == ["ann"]
    assert [s["name"] for s in objects["RoleBinding/gpuportal-admins-view"]["subjects"]] == ["amy", "bob"]
    assert "RoleBinding/gpuportal-admins-view" not in by_name(render_project(state(GrantedUnits("nvidia.com/gpu", 1, 1, 1))))


def test_it_keeps_only_the_namespace_and_a_zero_quota_under_the_retain_policy() -> None:
    objects = render_project(state(idle_resources=("nvidia.com/gpu", "nvidia.com/gpu")), retain_namespace=True)
    assert [o["kind"] for o in objects] == ["Namespace", "ResourceQuota"]
    assert objects[1]["spec"]["hard"] == {
        "requests.nvidia.com/gpu": "0",
        "requests.cpu": "0", "requests.memory": "0", "limits.cpu": "0", "limits.memory": "0",
    }
    assert render_project(state()) == []


@given(granted=st.integers(0, 50), guaranteed=st.integers(0, 80))
def test_every_rendered_queue_passes_volcanos_webhook_rule(granted: int, guaranteed: int) -> None:
    queue = render_queue(DepartmentQueue("nlp", (("nvidia.com/gpu", granted),), (("nvidia.com/gpu", guaranteed),)))
    if granted == 0:
        assert queue is None
        return
    assert queue is not None and queue_violations(queue) == []
    assert queue["spec"]["capability"] == {"nvidia.com/gpu": str(granted)}


def test_the_queue_check_names_what_volcano_refuses() -> None:
    bad = {"spec": {"capability": {"g": "1"}, "deserved": {"g": "2"}, "guarantee": {"resource": {"g": "3"}}}}
    assert queue_violations(bad) == ["deserved[g] must be >= guarantee[g]=3", "deserved[g]=2 must be <= capability[g]=1"]


A100 = "NVIDIA-A100-SXM4-80GB"


def test_mig_geometry_accepts_the_known_full_layouts_and_refuses_overlaps() -> None:
    geometry = GEOMETRIES["A100-80GB"]
    assert mig_fits(geometry, {"1g.10gb": 7})
    assert mig_fits(geometry, {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1})  # all-balanced
    assert mig_fits(geometry, {"4g.40gb": 1, "3g.40gb": 1})
    assert not mig_fits(geometry, {"3g.40gb": 2, "1g.10gb": 1})  # 6 of 7 SMs but no memory left
    assert not mig_fits(geometry, {"4g.40gb": 2})
    assert not mig_fits(geometry, {"1g.10gb+me": 2})


def test_it_refuses_mps_past_48_replicas_and_on_old_gpus_past_16() -> None:
    with pytest.raises(RenderError, match="maximum allowed replicas exceeded: 49 > 48"):
        check_node_sharing(NodePlan("n", A100, 8, sharing="mps", replicas=49))
    with pytest.raises(RenderError, match="17 > 16"):
        check_node_sharing(NodePlan("n", "Tesla-V100", 8, sharing="mps", replicas=17, compute_capability=(7, 0)))
    with pytest.raises(RenderError, match="replicas must be >= 2"):
        check_node_sharing(NodePlan("n", A100, 8, sharing="timeslice", replicas=1))
    with pytest.raises(RenderError, match="non MIG-capable"):
        check_node_sharing(NodePlan("n", A100, 8, sharing="mig"))


def test_mps_configs_name_the_mps_root_and_never_use_the_mixed_strategy() -> None:
    config = device_plugin_config(NodePlan("n", A100, 8, sharing="mps", replicas=4))
    assert config["flags"] == {"migStrategy": "none", "mpsRoot": "/run/nvidia/mps"}
    assert list(config["sharing"]) == ["mps"]
    assert config["sharing"]["mps"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 4}]


def test_the_planner_carves_the_demand_and_leaves_other_gpus_in_mig_mode_empty() -> None:
    plans = mig_plan([NodePlan("a", A100, 2, gpu_memory_mib=81920, mig_capable=True, sharing="mig")],
                     {A100: {"1g.10gb": 9, "3g.40gb": 1}})
    document = render_mig_parted_document(plans)
    (key,) = [name for name in document["mig-configs"] if name != "all-disabled"]
    entries = document["mig-configs"][key]
    assert sum(sum(e["mig-devices"].values()) for e in entries) == 10
    for entry in entries:
        assert entry["mig-enabled"] is True and isinstance(entry["devices"], list)
        assert mig_fits(GEOMETRIES["A100-80GB"], entry["mig-devices"])
    assert document["mig-configs"]["all-disabled"] == [{"devices": "all", "mig-enabled": False}]


def test_a_chosen_layout_that_does_not_fit_is_refused_before_it_reaches_a_node() -> None:
    plan = NodePlan("a", A100, 1, gpu_memory_mib=81920, mig_capable=True, sharing="mig",
                    mig_groups=(MigGroup((0,), (("7g.80gb", 1), ("1g.10gb", 1))),))
    with pytest.raises(RenderError, match="does not fit"):
        render_node_objects([plan], namespace="gpu-operator")


def test_node_labels_select_existing_config_keys() -> None:
    plans = [NodePlan("h", "NVIDIA-H100-80GB-HBM3", 8, sharing="timeslice", replicas=2),
             NodePlan("a", A100, 8, gpu_memory_mib=81920, mig_capable=True)]
    device_plugin, mig_parted, *nodes = render_node_objects(plans, namespace="gpu-operator")
    mig_keys = yaml.safe_load(mig_parted["data"]["config.yaml"])["mig-configs"]
    for node in nodes:
        labels = node["metadata"]["labels"]
        assert labels["nvidia.com/device-plugin.config"] in device_plugin["data"]
        assert labels.get("nvidia.com/mig.config", "all-disabled") in mig_keys
    assert nodes[0]["metadata"]["labels"]["nvidia.com/mig.config"] == "all-disabled"  # MIG-capable, not in MIG mode
    assert "nvidia.com/mig.config" not in nodes[1]["metadata"]["labels"]


@settings(max_examples=40, deadline=None)
@given(demand=st.dictionaries(st.sampled_from(["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]),
                              st.integers(0, 6), max_size=4))
def test_every_planned_layout_fits_its_gpus(demand: dict[str, int]) -> None:
    plans = mig_plan([NodePlan("a", A100, 4, gpu_memory_mib=81920, mig_capable=True, sharing="mig")], {A100: demand})
    for group in plans[0].mig_groups:
        assert mig_fits(GEOMETRIES["A100-80GB"], dict(group.profiles))


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"sharing": "mps", "sharing_replicas": None}, "sharing_replicas"),
        ({"sharing": "mps", "sharing_replicas": 49}, "sharing_replicas"),
        ({"sharing": "exclusive", "sharing_replicas": 4}, "sharing_replicas"),
        ({"sharing": "exclusive", "mig_layout": [{"devices": "all", "mig-devices": {"1g.10gb": 7}}]}, "mig_layout"),
        ({"sharing": "mig", "mig_layout": [{"devices": "some", "mig-devices": {}}]}, "mig_layout"),
        ({"sharing": "mig", "mig_layout": {"devices": "all"}}, "mig_layout"),
    ],
)
def test_a_node_refuses_sharing_settings_the_device_plugin_rejects(fields: dict[str, Any], field: str) -> None:
    from django.core.exceptions import ValidationError

    from clusters.models import Node

    with pytest.raises(ValidationError) as refused:
        Node(name="n", **fields).clean()
    assert field in refused.value.message_dict


def test_a_node_accepts_a_valid_mig_layout() -> None:
    from clusters.models import Node

    Node(name="n", sharing="mig", mig_layout=[{"devices": [0, 1], "mig-devices": {"3g.40gb": 2}}]).clean()
