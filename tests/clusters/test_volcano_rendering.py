"""Pure rendering for Volcano clusters: the Volcano vGPU quota keys and Queue resources, the
volcano-scheduler configuration and its checker (Volcano's refusals in its own words), and the
withholding of that configuration while Volcano's namespace is missing."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from delivery.drivers import Scope
from delivery.rendering import DepartmentQueue, GrantedUnits, queue_violations, quota_hard, render_queue
from delivery.volcano import (
    SCHEDULER_CONF_KEY,
    render_scheduler_configmap,
    render_volcano_objects,
    schedule_policy,
    scheduler_conf,
    scheduler_conf_violations,
    vgpu_unit_resources,
)


def conf_text(**deviceshare: Any) -> str:
    document = scheduler_conf(["binpack"])
    document["tiers"][1]["plugins"][-1]["arguments"] = deviceshare
    return yaml.safe_dump(document)


def test_a_volcano_vgpu_grant_caps_count_memory_and_cores_with_requests_keys() -> None:
    grant = GrantedUnits("volcano.sh/vgpu-number", 3, 4000, 16384,
                         extra_requests=vgpu_unit_resources(memory_mib=20480, cores=25))
    hard = quota_hard((grant,))
    assert hard == {
        "requests.volcano.sh/vgpu-number": "3", "requests.cpu": "12000m", "requests.memory": "49152Mi",
        "limits.cpu": "12000m", "limits.memory": "49152Mi",
        "requests.volcano.sh/vgpu-memory": "61440", "requests.volcano.sh/vgpu-cores": "75",
    }


@given(granted=st.integers(1, 64), guaranteed=st.integers(0, 80), memory=st.integers(1, 141312), cores=st.integers(1, 100))
def test_queues_with_vgpu_resources_pass_volcanos_webhook_rule(granted: int, guaranteed: int, memory: int, cores: int) -> None:
    resources = [("volcano.sh/vgpu-number", granted), *((name, granted * per) for name, per in
                                                        vgpu_unit_resources(memory_mib=memory, cores=cores))]
    promised = [("volcano.sh/vgpu-number", guaranteed), *((name, guaranteed * per) for name, per in
                                                         vgpu_unit_resources(memory_mib=memory, cores=cores))]
    queue = render_queue(DepartmentQueue("nlp", tuple(resources), tuple(promised)))
    assert queue is not None and queue_violations(queue) == []
    assert queue["spec"]["capability"]["volcano.sh/vgpu-memory"] == str(granted * memory)


def test_without_volcano_vgpu_flavors_the_scheduler_runs_no_deviceshare() -> None:
    text = render_scheduler_configmap([])["data"][SCHEDULER_CONF_KEY]
    plugins = [p["name"] for tier in yaml.safe_load(text)["tiers"] for p in tier["plugins"]]
    assert "deviceshare" not in plugins and "capacity" in plugins and "proportion" not in plugins
    assert yaml.safe_load(text)["actions"] == "enqueue, allocate, backfill, reclaim"
    assert scheduler_conf_violations(text) == []


@pytest.mark.parametrize(
    ("policies", "expected"),
    [(["spread"], "spread"), (["spread", "spread"], "spread"), (["spread", "binpack"], "binpack"), (["binpack"], "binpack")],
)
def test_the_scheduler_spreads_only_when_every_volcano_vgpu_flavor_asks_for_it(policies: list[str], expected: str) -> None:
    assert schedule_policy(policies) == expected
    configmap = render_scheduler_configmap(policies)
    assert (configmap["metadata"]["name"], configmap["metadata"]["namespace"]) == ("volcano-scheduler-configmap", "volcano-system")
    [deviceshare] = [p for t in yaml.safe_load(configmap["data"][SCHEDULER_CONF_KEY])["tiers"] for p in t["plugins"]
                     if p["name"] == "deviceshare"]
    assert deviceshare["arguments"] == {"deviceshare.VGPUEnable": True, "deviceshare.SchedulePolicy": expected}


@given(st.lists(st.sampled_from(["binpack", "spread"]), max_size=6))
def test_every_rendered_scheduler_configuration_passes_the_checker(policies: list[str]) -> None:
    assert scheduler_conf_violations(render_scheduler_configmap(policies)["data"][SCHEDULER_CONF_KEY]) == []


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"deviceshare.GPUSharingEnable": True, "deviceshare.GPUNumberEnable": True},
         "can not define true in both gpu sharing and gpu number"),
        ({"deviceshare.GPUSharingEnable": True, "deviceshare.VGPUEnable": True}, "gpu-share and vgpu can't be used together"),
        ({"deviceshare.GPUNumberEnable": True, "deviceshare.VGPUEnable": True}, "gpu-share and vgpu can't be used together"),
        ({"deviceshare.VGPUEnable": True, "deviceshare.SchedulePolicy": "random"},
         "deviceshare.SchedulePolicy must be binpack or spread, got 'random'"),
    ],
)
def test_the_checker_refuses_deviceshares_fatal_combinations_in_volcanos_words(arguments: dict[str, Any], problem: str) -> None:
    assert scheduler_conf_violations(conf_text(**arguments)) == [problem]


def test_the_checker_refuses_what_volcanos_loader_refuses() -> None:
    document = scheduler_conf([])
    document["actions"] = "enqueue, allocate, dance"
    document["tiers"][1]["plugins"] += [{"name": "proportion"}]
    document["tiers"][1]["plugins"][0]["enableHierarchy"] = True
    assert scheduler_conf_violations(yaml.safe_dump(document)) == [
        "failed to find Action  dance",
        "proportion and drf with hierarchy enabled conflicts",
        "capacity and proportion plugin are in conflict, the two plugins cannot be used together",
    ]
    assert scheduler_conf_violations("actions: [") != []


class NoVolcanoNamespace:
    def __init__(self, present: bool) -> None:
        self.present = present

    def namespace_exists(self, name: str) -> bool:
        return self.present or name != "volcano-system"


@pytest.mark.django_db
@pytest.mark.parametrize("present", [True, False])
def test_the_scheduler_configuration_is_withheld_while_volcanos_namespace_is_missing(present: bool) -> None:
    from clusters.models import Cluster
    from delivery.services import _shared_scope

    cluster = Cluster.objects.create(name="volcanic", use_volcano=True)
    objects = render_volcano_objects(["spread"])
    scope, missing = _shared_scope(cluster=cluster, driver=NoVolcanoNamespace(present), scope=Scope(namespace=None, objects=objects))  # type: ignore[arg-type]
    kinds = [obj["kind"] for obj in scope.objects]
    if present:
        assert (kinds, missing) == (["ConfigMap", "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"], "")
    else:
        assert kinds == ["MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"]
        assert "namespace volcano-system does not exist on cluster volcanic" in missing
