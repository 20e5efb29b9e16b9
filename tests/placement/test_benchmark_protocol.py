"""The benchmark protocol (placement-benchmark.md §2, §7): order, inflation, ranks, metrics."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from placement import Cluster, Workload, make_policy
from placement.fragmentation import FragModel
from placement.policies.amounts import total_demand
from placement.simulation.mig_variant import profile_for_share, to_mig
from placement.simulation.protocol import prepare
from placement.simulation.replay import replay
from placement.simulation.run import run_one
from placement.simulation.trace import load_pods, node_list_path, pod_list_path

from .builders import cpu_only, node, shared, whole

REPO = Path(__file__).resolve().parents[2]
TRACE = node_list_path(REPO)
needs_trace = pytest.mark.skipif(not TRACE.exists(), reason="shared trace not available")


def pods(n: int) -> list:  # type: ignore[type-arg]
    out = []
    for i in range(n):
        r = [whole(1), shared(500), cpu_only(2), whole(2)][i % 4]
        out.append(type(r)(r.cpu_milli, r.memory_mib, r.gpu_count, r.gpu_milli, None, r.allowed_models,
                           name=f"pod-{i:03d}"))
    return out


def test_inflation_appends_resamples_until_the_next_would_pass_130_percent() -> None:
    base = pods(20)  # 17.5 GPUs of demand
    capacity = 20_000.0
    p = prepare(base, 3, capacity, seed=42, demand=total_demand)
    total = sum(total_demand(r) for r in p.sequence)
    assert total <= 1.3 * capacity < total + 2000
    assert sorted(r.name for r in p.sequence[:20]) == sorted(r.name for r in base)
    assert sorted(p.rank) == [0, 1, 2]


def test_lists_above_130_percent_are_thinned() -> None:
    base = pods(40)
    p = prepare(base, 2, 10_000.0, seed=1, demand=total_demand)
    assert sum(total_demand(r) for r in p.sequence) <= 13_000 and len(p.sequence) < 40


def test_same_seed_same_order_and_ranks_other_seed_differs() -> None:
    base = pods(30)
    a, b, c = (prepare(base, 50, 30_000.0, s, total_demand) for s in (42, 42, 43))
    assert [r.name for r in a.sequence] == [r.name for r in b.sequence] and a.rank == b.rank
    assert [r.name for r in a.sequence] != [r.name for r in c.sequence] or a.rank != c.rank


def test_replay_metrics_on_a_hand_checked_run() -> None:
    c = Cluster([node("a", 64, 2)])
    seq = [whole(1), shared(500), whole(1), shared(500), cpu_only(1)]
    wl = Workload.from_requests(seq)
    r = replay(c, make_policy("firstfit"), seq, FragModel(c, wl))
    # arrivals: 50 %, 75 % (A 75), 125 % rejected at x=75 (A 75), 150 % (A 100)
    assert r.first_rejection == pytest.approx((75.0, 75.0))
    assert r.a100 == pytest.approx(75.0) and r.a130 == pytest.approx(100.0)
    assert r.rejected == {"whole-1": 1} and r.decisions == 5


def test_mig_mapping_picks_the_smallest_profile_with_enough_compute_slices() -> None:
    assert [profile_for_share(m) for m in (50, 142, 143, 285, 286, 470, 571, 572, 810)] == [
        "1g.10gb", "1g.10gb", "2g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "4g.40gb", "7g.80gb", "7g.80gb"]
    assert to_mig(whole(8)).mig_profile == "7g.80gb" and to_mig(whole(8)).gpu_count == 8
    assert to_mig(cpu_only(4)).mig_profile is None


@needs_trace
def test_mig_variant_of_the_default_list_has_the_documented_profile_mix() -> None:
    from collections import Counter
    mix = Counter(to_mig(p).mig_profile for p in load_pods(pod_list_path("default", REPO)) if 0 < p.gpu_milli < 1000)
    assert mix == {"1g.10gb": 32, "2g.20gb": 280, "3g.40gb": 389, "4g.40gb": 971, "7g.80gb": 1406}


@needs_trace
def test_firstfit_reproduces_the_reference_calibration_on_the_default_trace() -> None:
    r = run_one(TRACE, pod_list_path("default", REPO), 42, "firstfit")
    assert r.a100 == pytest.approx(94.07, abs=0.05)  # §6: 94.1-94.4 over seeds


def test_bench_cli_runs_one_policy_on_small_csv_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes_csv = tmp_path / "nodes.csv"
    nodes_csv.write_text("sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
        f"n{i},32000,131072,4,G2\n" for i in range(6)))
    pods_csv = tmp_path / "pods.csv"
    pods_csv.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n" + "".join(
        f"p{i:03d},4000,8192,{[1, 1, 0, 2][i % 4]},{[1000, 470, 0, 1000][i % 4]},\n" for i in range(24)))
    spec = importlib.util.spec_from_file_location("bench_placement", REPO / "bench" / "placement.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--nodes", str(nodes_csv), "--pods", str(pods_csv), "--policy", "ours", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["runs"][0]["policy"] == "ours" and 0 < out["runs"][0]["a100"] <= 100
    assert mod.main(["--nodes", str(nodes_csv), "--pods", str(pods_csv), "--seed", "1", "--workers", "1"]) == 0
    assert "firstfit" in capsys.readouterr().out
