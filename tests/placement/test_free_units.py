"""``placing.free_units`` (the arithmetic count of the request form's free units) equals placing
the units one after another under every policy, on random inventories with random bookings already
made, for random shares, whole-GPU shapes and MIG instances; and it places none of them (its work
is counted: the policy is never asked). ``mig_tables.chain_counts`` calls no state UNSURE for any
profile of any geometry known, so the count never falls back for a single MIG instance.

The count it is compared with is the engine's own sequence (``place`` then ``apply`` until a
rejection or the limit), not a formula: the test can fail whenever the argument in
``free_units``'s docstring is wrong for some state or policy.
"""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placement import GEOMETRIES, Cluster, Gpu, Node, Placement, Request, make_policy, mig_tables
from placement.placing import free_units, place
from placement.policies import Policy

MODELS = ("A", "B", "C")
POLICIES = ("random", "dotproduct", "clustering", "packing", "bestfit", "fgd", "firstfit", "ours", "spread")
MIG_PROFILES = sorted({profile.name for geometry in GEOMETRIES.values() for profile in geometry.profiles})
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class CountingPolicy(Policy):
    """A policy that counts the decisions asked of it and hands them to another."""

    name = "counting"

    def __init__(self, inner: Policy) -> None:
        super().__init__()
        self.inner = inner
        self.asked = 0

    def choose(self, cluster: Cluster, request: Request, feasible: object) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
        self.asked += 1
        return self.inner.choose(cluster, request, feasible)  # type: ignore[arg-type]

    def pick_node(self, cluster: Cluster, request: Request, feasible: object) -> int:  # pragma: no cover
        return self.choose(cluster, request, feasible)[0]


@st.composite
def inventories(draw: st.DrawFn, share: int = 500) -> list[Node]:
    """1–6 nodes of 0–8 GPUs: shared-mode GPUs with shares already taken (often leaving exactly one
    or two ``share`` free, the boundary of the count), now and then MIG GPUs or a node of mixed
    models, CPU and memory partly or wholly used."""
    boundary = [1000 - share * k for k in (1, 2) if 1000 - share * k >= 0]
    taken = [0, 0, 100, 500, 1000, *boundary, *boundary]
    nodes = []
    for i in range(draw(st.integers(1, 6))):
        count = draw(st.integers(0, 8))
        model = draw(st.sampled_from(MODELS))
        mixed = draw(st.integers(0, 4)) == 0
        gpus = []
        for index in range(count):
            geometry = draw(st.sampled_from([None, None, None, *sorted(GEOMETRIES)]))
            used = 0 if geometry else draw(st.sampled_from(taken))
            gpus.append(Gpu(index, draw(st.sampled_from(MODELS)) if mixed else model, 80 * 1024, used, geometry))
        cpu, memory = draw(st.integers(0, 64)) * 1000, draw(st.integers(0, 256)) * 1024
        cpu_used = draw(st.integers(0, cpu // 1000)) * 1000 if draw(st.booleans()) else 0
        memory_used = draw(st.integers(0, memory // 1024)) * 1024 if draw(st.booleans()) else 0
        nodes.append(Node(f"n{i}", cpu, memory, tuple(gpus), cpu_used, memory_used))
    return nodes


@st.composite
def shapes(draw: st.DrawFn) -> Request:
    """A unit the count covers: a share of one GPU, one to three whole GPUs or a MIG instance on
    one GPU, some CPU and memory (or none), of some models (or any)."""
    cpu = draw(st.sampled_from([0, 500, 1000, 4000, 8000]))
    memory = draw(st.sampled_from([0, 1024, 16384, 32768]))
    models = draw(st.frozensets(st.sampled_from(MODELS), max_size=2))
    kind = draw(st.sampled_from(["shared", "whole", "mig"]))
    if kind == "shared":
        return Request(cpu, memory, 1, draw(st.sampled_from([1, 100, 125, 250, 300, 333, 500, 999])), None, models)
    if kind == "mig":
        return Request(cpu, memory, 1, 0, draw(st.sampled_from(MIG_PROFILES)), models)
    return Request(cpu, memory, draw(st.integers(1, 3)), 1000, None, models)


@st.composite
def bookings(draw: st.DrawFn) -> list[Request]:
    """What is already booked before the count: any kind of unit, MIG instances included."""
    out = []
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["shared", "whole", "mig", "cpu"]))
        cpu = draw(st.sampled_from([0, 1000, 4000]))
        if kind == "shared":
            out.append(Request(cpu, 1024, 1, draw(st.sampled_from([100, 250, 500, 800]))))
        elif kind == "whole":
            out.append(Request(cpu, 1024, draw(st.integers(1, 2)), 1000))
        elif kind == "mig":
            out.append(Request(cpu, 1024, 1, 0, draw(st.sampled_from(MIG_PROFILES))))
        else:
            out.append(Request(cpu, 2048))
    return out


def booked(nodes: list[Node], earlier: list[Request], seed: int) -> Cluster:
    """The inventory with ``earlier`` placed (those that fit) by the default policy."""
    cluster = Cluster(nodes, rank=random.Random(seed).sample(range(len(nodes)), len(nodes)))
    policy = make_policy("ours")
    for request in earlier:
        decision = place(cluster, request, policy, explain=False)
        if isinstance(decision, Placement):
            cluster.apply(decision)
    return cluster


def one_by_one(cluster: Cluster, request: Request, policy: Policy, limit: int) -> int:
    """The sequence the count mirrors: place and book unit after unit until one is rejected."""
    placed = 0
    while placed < limit:
        decision = place(cluster, request, policy, explain=False)
        if not isinstance(decision, Placement):
            break
        cluster.apply(decision)
        placed += 1
    return placed


@st.composite
def scenes(draw: st.DrawFn) -> tuple[list[Node], Request]:
    """A shape, and an inventory whose shared GPUs often have exactly its share free."""
    shape = draw(shapes())
    return draw(inventories(share=shape.gpu_milli)), shape


@SETTINGS
@given(scenes(), bookings(), st.sampled_from(POLICIES), st.integers(0, 10_000), st.sampled_from([1, 3, 32, 10_000]))
def test_the_count_equals_placing_the_units_one_by_one_under_every_policy(
    scene: tuple[list[Node], Request], earlier: list[Request], policy_name: str, seed: int, limit: int,
) -> None:
    nodes, shape = scene
    cluster = booked(nodes, earlier, seed)
    policy = CountingPolicy(make_policy(policy_name, seed=seed))
    counted = free_units(cluster, shape, limit)
    assert policy.asked == 0  # the count asks the policy nothing and books nothing
    expected = one_by_one(cluster.copy(), shape, policy, limit)
    assert counted == expected
    assert policy.asked >= expected  # the sequence asks once a unit (one more for the rejection)


@SETTINGS
@given(inventories(), bookings(), shapes(), st.integers(0, 10_000))
def test_the_count_leaves_the_cluster_as_it_found_it(nodes: list[Node], earlier: list[Request], shape: Request,
                                                      seed: int) -> None:
    cluster = booked(nodes, earlier, seed)
    before = cluster.snapshot()
    free_units(cluster, shape, 32)
    assert cluster.snapshot() == before


def test_the_count_stops_at_its_limit_and_says_nothing_of_multi_gpu_mig_or_cpu_only_units() -> None:
    cluster = Cluster([Node("n0", 64_000, 512 * 1024, tuple(Gpu(i, "A", 80 * 1024) for i in range(8)))])
    assert free_units(cluster, Request(1000, 1024, 1, 250), 1000) == 32  # four quarters on each of 8 GPUs
    assert free_units(cluster, Request(1000, 1024, 1, 250), 5) == 5
    assert free_units(cluster, Request(16_000, 1024, 1, 1000), 32) == 4  # the CPU binds before the GPUs
    assert free_units(cluster, Request(1000, 1024, 3, 1000), 32) == 2
    assert free_units(cluster, Request(1000, 1024, 1, 1000, allowed_models=frozenset({"B"})), 32) == 0
    assert free_units(cluster, Request(1000, 1024, 1, 0, "1g.10gb"), 32) == 0  # no GPU in MIG mode
    carved = Cluster([Node("m0", 64_000, 512 * 1024, tuple(Gpu(i, "A", 80 * 1024, 0, "A100-80GB") for i in range(2)))])
    carved.apply(Placement(Request(1000, 1024, 1, 0, "3g.40gb"), "m0", (0,), (4,)))
    assert free_units(carved, Request(1000, 1024, 1, 0, "3g.40gb"), 32) == 3  # one left on GPU 0, two on GPU 1
    assert free_units(carved, Request(1000, 1024, 1, 0, "1g.10gb"), 32) == 4 + 7
    assert free_units(carved, Request(1000, 1024, 2, 0, "1g.10gb"), 32) is None
    assert free_units(cluster, Request(1000, 1024), 32) is None


def test_no_mig_state_of_any_known_profile_has_a_count_that_depends_on_the_starts() -> None:
    for profile in MIG_PROFILES:
        assert not (mig_tables.chain_counts(profile) == mig_tables.UNSURE).any(), profile
