"""The engine's public API: building state from plain data, booking, releasing, explaining."""

from __future__ import annotations

import subprocess
import sys

import pytest

from placement import (
    Cluster,
    Gpu,
    MigSlice,
    Node,
    Placement,
    Rejection,
    RejectionKind,
    Request,
    default_policy,
)
from placement.placing import place

from .builders import GIB, cpu_only, mig, mig_node, node, shared, whole

H100_MIB = 80 * GIB


def h100_cluster() -> Cluster:
    return Cluster([
        Node("gpu-07", 64_000, 512 * GIB, (Gpu(0, "H100", H100_MIB, 850), Gpu(1, "H100", H100_MIB, 900))),
        Node("gpu-08", 64_000, 512 * GIB, (Gpu(0, "A100", H100_MIB, 0),)),
    ])


def test_share_rejection_names_model_size_largest_free_share_and_node() -> None:
    d = place(h100_cluster(), Request(4000, 8 * GIB, 1, 250, allowed_models=frozenset({"H100"})))
    assert isinstance(d, Rejection) and d.kind is RejectionKind.GPU_SHARE
    assert d.reason == ("no H100 with 20 GiB (25% of a GPU) free; the largest free share is "
                        "12 GiB (15% of a GPU) on node gpu-07 (GPU 0)")


def test_whole_gpu_rejection_says_how_many_are_free_at_most() -> None:
    d = place(h100_cluster(), Request(4000, GIB, 2, 1000))
    assert isinstance(d, Rejection) and d.kind is RejectionKind.WHOLE_GPUS
    assert d.reason == "no node has 2 fully free GPUs; the most is 1 on node gpu-08"


def test_cpu_rejection_points_at_the_node_with_most_room() -> None:
    d = place(h100_cluster(), cpu_only(100))
    assert isinstance(d, Rejection) and d.kind is RejectionKind.CPU_MEMORY
    assert "100 cores" in d.reason and "the most free is 64 cores" in d.reason


def test_unknown_model_and_bad_requests_are_rejected_with_their_reason() -> None:
    c = h100_cluster()
    d = place(c, Request(1000, GIB, 1, 500, allowed_models=frozenset({"T4"})))
    assert isinstance(d, Rejection) and d.kind is RejectionKind.NO_SUCH_MODEL and "T4" in d.reason
    bad = place(c, Request(1000, GIB, 2, 500))
    assert isinstance(bad, Rejection) and bad.kind is RejectionKind.INVALID


def test_mig_rejection_names_the_profile() -> None:
    c = Cluster([mig_node("m", 1, slices={0: (MigSlice("4g.40gb", 0), MigSlice("2g.20gb", 4))})])
    d = place(c, mig("3g.40gb"))
    assert isinstance(d, Rejection) and d.kind is RejectionKind.MIG_SLICE and "3g.40gb" in d.reason


def test_placement_reports_node_gpus_and_mig_start() -> None:
    c = Cluster([mig_node("m", 2)])
    d = place(c, mig("3g.40gb"))
    assert isinstance(d, Placement) and d.node == "m" and d.mig_start == 4 and len(d.gpu_indices) == 1


def test_apply_refuses_what_no_longer_fits() -> None:
    c = Cluster([node("a", 8, 1)])
    d = place(c, whole(1))
    assert isinstance(d, Placement)
    c.apply(d)
    with pytest.raises(ValueError):
        c.apply(d)  # the same GPU twice
    with pytest.raises(ValueError):
        c.apply(Placement(whole(1), "a", (7,)))  # no such GPU


def test_release_refuses_what_was_never_booked() -> None:
    c = Cluster([node("a", 8, 1)])
    with pytest.raises(ValueError):
        c.release(Placement(shared(300), "a", (0,)))


def test_state_rebuilds_from_plain_records_with_reservations() -> None:
    rows = [
        {"name": "a", "cpu_milli": 32000, "memory_mib": 128 * GIB,
         "gpus": [{"index": 0, "model": "A100", "memory_mib": H100_MIB}, {"index": 1, "model": "A100"}]},
        {"name": "b", "cpu_milli": 16000, "memory_mib": 64 * GIB, "gpu_count": 1, "gpu_model": "A100-80GB",
         "gpus": [{"index": 0, "model": "A100-80GB", "mig_geometry": "A100-80GB"}]},
    ]
    c = Cluster.from_records(rows)
    booked = []
    for r in (shared(300), whole(1), mig("2g.20gb")):
        d = place(c, r)
        assert isinstance(d, Placement)
        booked.append(c.apply(d))
    again = Cluster.from_records(rows, [p.to_record() for p in booked])
    assert again.snapshot() == c.snapshot()
    assert [Placement.from_record(p.to_record()) for p in booked] == booked


def test_exported_nodes_rebuild_an_identical_state() -> None:
    c = Cluster([node("a", 32, 4), mig_node("m", 2)])
    for r in (shared(470), whole(2), mig("1g.10gb"), mig("4g.40gb")):
        d = place(c, r)
        assert isinstance(d, Placement)
        c.apply(d)
    rebuilt, original = Cluster(c.nodes()).snapshot(), c.snapshot()
    rebuilt.pop("tags"), original.pop("tags")  # pod tags (for GPU clustering) are not inventory
    assert rebuilt == original


def test_default_policy_works_without_any_workload_history() -> None:
    c = Cluster([node("a", 32, 4), node("b", 32, 4)])
    pol = default_policy()
    for _ in range(10):
        d = place(c, shared(300), pol)
        assert isinstance(d, Placement)
        c.apply(d)
    assert c.allocated_milli() == 3000


def test_the_engine_imports_no_django() -> None:
    code = "import sys, placement.simulation.run; print(any(m.startswith('django') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
