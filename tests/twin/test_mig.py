"""MIG in the twin (docs/twin.md, "Clusters", "Workloads"): a cluster's ``mig`` column, a line or a
flavor asking a MIG instance, its weight as the demo's catalogue weighs one, errors naming the line
and the field, and the replay placing MIG units as the portal's mixed strategy does."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from placement import Gpu, Node
from twin.clusters import nodes_read, nodes_write
from twin.errors import TwinInputError
from twin.mig import mig_equivalents, profile_weight
from twin.policy import Department, Policy, PriorityClass, policy_read, policy_write
from twin.replay.decisions import RECLAIM, START, replay_decisions
from twin.workload import Job, jobs_read, jobs_write, mig_shape

CLUSTER = "sn,cpu_milli,memory_mib,gpu,model,mig\nm0,64000,262144,8,A100-SXM4-80GB,A100-80GB\nn1,64000,262144,8,A100-SXM4-80GB,\n"
LINE = {"submit_at": 0, "department": "nlp", "project": "nlp-a", "mig_profile": "3g.40gb", "gpu_model": "A100-SXM4-80GB",
        "quantity": 2, "runtime_s": 600, "requested_s": 3600, "priority_class": "gpu-standard", "busy": 0.4}


def test_the_mig_column_puts_a_node_in_mig_mode_and_writes_back() -> None:
    nodes = nodes_read(CLUSTER)
    assert {gpu.mig_geometry for gpu in nodes[0].gpus} == {"A100-80GB"}
    assert {gpu.mig_geometry for gpu in nodes[1].gpus} == {None}
    assert nodes_read(nodes_write(nodes)) == nodes
    plain = nodes_read("sn,cpu_milli,memory_mib,gpu,model\nn0,1,1,2,T4\n")
    assert nodes_write(plain).splitlines()[0] == "sn,cpu_milli,memory_mib,gpu,model"  # the Alibaba columns alone


@pytest.mark.parametrize(("row", "message"), [("b,1,1,8,A100,A100-96GB", "no MIG geometry 'A100-96GB'"),
                                              ("b,1,1,0,,A100-80GB", "without GPUs")])
def test_a_bad_geometry_names_the_line_and_the_column(row: str, message: str) -> None:
    with pytest.raises(TwinInputError, match=message) as caught:
        nodes_read(CLUSTER + row + "\n", source="c.csv")
    assert (caught.value.line, caught.value.field) == (4, "mig")


def test_an_instance_weighs_the_larger_of_its_compute_and_memory_fractions_as_the_demo_does() -> None:
    assert mig_equivalents(1, 1) == Decimal("0.1429") and mig_equivalents(3, 4) == Decimal("0.5")
    assert profile_weight("1g.10gb", ["A100-SXM4-80GB"]) == Decimal("0.1429")  # demo/seed.py's a100-mig-1g-10gb
    assert profile_weight("3g.40gb", []) == Decimal("0.5")  # demo/seed.py's a100-mig-3g-40gb
    assert profile_weight("1g.10gb", ["A100-SXM4-40GB"]) == Decimal("0.25")  # 2 memory slices of the 40 GB A100
    assert profile_weight("7g.80gb", ["H100"]) == Decimal(1)


def test_a_line_asking_a_mig_instance_reads_and_writes_back() -> None:
    jobs = jobs_read(json.dumps(LINE) + "\n")
    shape = jobs[0].shape
    assert (shape.mig_profile, shape.mig_weight, shape.equivalents, shape.gpu_milli) == ("3g.40gb", Decimal("0.5"),
                                                                                         Decimal("0.5"), 500)
    assert jobs_read(jobs_write(jobs)) == jobs
    assert jobs_read(jobs_write(jobs, fmt="csv"), fmt="csv")[0].shape == shape


@pytest.mark.parametrize(("change", "field", "message"), [
    ({"mig_profile": "5g.50gb"}, "mig_profile", "has no MIG profile '5g.50gb'"),
    ({"mig_profile": "3g.40gb", "gpu_model": "V100"}, "gpu_model", "has no MIG geometry"),
    ({"mig_profile": "1g.10gb", "gpu_model": None}, "mig_profile", "different sizes"),
    ({"mig_profile": "9g.1gb", "gpu_model": None}, "mig_profile", "no MIG geometry has a profile"),
    ({"num_gpu": 2}, "num_gpu", "one instance on one GPU"),
])
def test_a_bad_mig_ask_names_the_line_and_the_field(change: dict[str, object], field: str, message: str) -> None:
    text = json.dumps(LINE) + "\n" + json.dumps({**LINE, **change}) + "\n"
    with pytest.raises(TwinInputError, match=message) as caught:
        jobs_read(text, source="w")
    assert (caught.value.line, caught.value.field) == (2, field)


def test_a_policy_flavor_may_be_a_mig_instance() -> None:
    text = """
departments: [{name: nlp, guarantee: 8}]
priority_classes: [{name: gpu-standard, value: 10000}]
flavors:
  - {name: mig-3g, mig_profile: 3g.40gb, gpu_model: A100-SXM4-80GB}
"""
    policy = policy_read(text)
    assert policy.flavors["mig-3g"] == mig_shape("3g.40gb", frozenset({"A100-SXM4-80GB"}))
    assert policy_read(policy_write(policy)) == policy
    with pytest.raises(TwinInputError, match="flavors\\[0\\]: mig_profile"):
        policy_read(text.replace("3g.40gb", "3g.41gb").replace(", gpu_model: A100-SXM4-80GB", ""), source="p.yaml")


def test_a_policy_mig_flavor_may_weigh_what_the_portal_stores_and_a_bad_weight_is_named() -> None:
    """The portal keeps each MIG flavor's GPU-equivalents as entered: its export writes that weight
    and the twin reads it back, instead of the demo's rule."""
    text = """
departments: [{name: nlp, guarantee: 8}]
priority_classes: [{name: gpu-standard, value: 10000}]
flavors:
  - {name: mig-1g, mig_profile: 1g.10gb, gpu_model: A100-SXM4-80GB, gpu_equivalents: 0.2}
"""
    policy = policy_read(text)
    assert (policy.flavors["mig-1g"].equivalents, policy.flavors["mig-1g"].gpu_milli) == (Decimal("0.2"), 200)
    assert policy_read(policy_write(policy)) == policy
    for bad in ("1.5", "0", "many"):
        with pytest.raises(TwinInputError, match="flavors\\[0\\]: gpu_equivalents"):
            policy_read(text.replace("gpu_equivalents: 0.2", f"gpu_equivalents: {bad}"), source="p.yaml")


def _policy() -> Policy:
    model = frozenset({"A100-SXM4-80GB"})
    return Policy((Department("nlp", Decimal(16), Decimal(16)),),
                  {"gpu-standard": PriorityClass("gpu-standard", 10000, True, Decimal(1), 300.0)},
                  {"whole": mig_shape("7g.80gb", model), "mig-3g": mig_shape("3g.40gb", model)})


def _job(line: int, at: float, shape_name: str, quantity: int) -> Job:
    policy = _policy()
    return Job(line, at, "nlp", "nlp-a", policy.flavors[shape_name], quantity, 3600.0, 3600.0, "gpu-standard", 0.5,
               shape_name)


def test_mig_units_fill_carved_gpus_first_and_count_their_weight() -> None:
    """Two 3g.40gb instances fill one GPU (starts 0 and 4) before a second GPU is carved; the
    units weigh 0.5 each for quota; a node in shared mode takes none, and a fifth finds no slice."""
    nodes = [Node("shared", 64000, 262144, tuple(Gpu(i, "A100-SXM4-80GB") for i in range(2))),
             Node("mig", 64000, 262144, tuple(Gpu(i, "A100-SXM4-80GB", mig_geometry="A100-80GB") for i in range(2)))]
    jobs = [_job(1, 0.0, "mig-3g", 1), _job(2, 10.0, "mig-3g", 1), _job(3, 20.0, "mig-3g", 2), _job(4, 30.0, "mig-3g", 1)]
    log, replay = replay_decisions(jobs, nodes, _policy())
    starts = [decision for decision in log if decision.kind == START]
    units = [unit for decision in starts[:3] for unit in decision.units]
    assert [decision.line for decision in starts] == [1, 2, 3, 4] and {unit.node for unit in units} == {"mig"}
    assert {unit.gpus for unit in units[:2]} == {(0,)} and {unit.mig for unit in units[:2]} == {("3g.40gb", 0), ("3g.40gb", 4)}
    assert {unit.gpus for unit in units[2:]} == {(1,)} and {unit.mig for unit in units[2:]} == {("3g.40gb", 0), ("3g.40gb", 4)}
    assert [decision.line for decision in log if decision.kind == "refused"][:1] == [4]  # until the first ends
    assert starts[3].at == 3600.0 and replay.world.policy.flavors["mig-3g"].equivalents == Decimal("0.5")


def test_a_whole_gpu_takes_an_uncarved_gpu_of_a_mig_node_and_a_share_none() -> None:
    """The mixed strategy: an empty GPU of a MIG node is whatever its first unit needs: a whole
    GPU may take it; a share (a vGPU share, which a MIG node does not offer) never does."""
    model = frozenset({"A100-SXM4-80GB"})
    nodes = [Node("mig", 64000, 262144, tuple(Gpu(i, "A100-SXM4-80GB", mig_geometry="A100-80GB") for i in range(2)))]
    policy = Policy(_policy().departments, _policy().classes,
                    {"mig-3g": mig_shape("3g.40gb", model), "whole": jobs_read(json.dumps(
                        {**LINE, "mig_profile": None, "gpu_model": "A100-SXM4-80GB", "num_gpu": 1}) + "\n")[0].shape,
                     "half": jobs_read(json.dumps({**LINE, "mig_profile": None, "gpu_model": "A100-SXM4-80GB",
                                                   "num_gpu": 1, "gpu_milli": 500}) + "\n")[0].shape})
    jobs = [Job(line, float(line), "nlp", "nlp-a", policy.flavors[name], 1, 3600.0, 3600.0, "gpu-standard", 0.5, name)
            for line, name in ((1, "mig-3g"), (2, "whole"), (3, "half"), (4, "mig-3g"))]
    log, _ = replay_decisions(jobs, nodes, policy)
    placed = {decision.line: decision.units[0] for decision in log if decision.kind == START}
    assert placed[1].mig is not None and placed[2].milli == 1000 and placed[2].gpus != placed[1].gpus
    assert 3 not in placed  # the share: refused, for capacity
    assert placed[4].gpus == placed[1].gpus and placed[4].mig != placed[1].mig  # the carved GPU, its other half


def test_a_whole_gpu_reclaims_the_lower_priority_mig_instances_on_the_only_gpu() -> None:
    """nlp's preemptible work carves the only GPU into two 3g.40gb instances; nlp then asks a whole
    GPU at a class that preempts: the victim choice takes both instances (a cut of MIG instances
    frees the GPU though it frees no thousandths: the capacity bound must not say no)."""
    model = frozenset({"A100-SXM4-80GB"})
    whole = jobs_read(json.dumps({**LINE, "mig_profile": None, "gpu_model": "A100-SXM4-80GB", "num_gpu": 1}) + "\n")[0].shape
    classes = {**_policy().classes, "gpu-preemptible": PriorityClass("gpu-preemptible", 1000, False, Decimal(1), 0.0)}
    policy = Policy((Department("nlp", Decimal(0), Decimal(1)),), classes, {"mig-3g": mig_shape("3g.40gb", model),
                                                                           "whole": whole})
    nodes = [Node("mig", 64000, 262144, (Gpu(0, "A100-SXM4-80GB", mig_geometry="A100-80GB"),))]
    jobs = [Job(1, 0.0, "nlp", "nlp-b", policy.flavors["mig-3g"], 2, 7200.0, 7200.0, "gpu-preemptible", 0.5, "mig-3g"),
            Job(2, 10.0, "nlp", "nlp-a", whole, 1, 3600.0, 3600.0, "gpu-standard", 0.5, "whole")]
    log, _ = replay_decisions(jobs, nodes, policy)
    reclaims = [decision for decision in log if decision.kind == RECLAIM]
    assert [decision.line for decision in reclaims] == [2]
    assert sum(units for _, units in reclaims[0].victims) == 2
