"""The generator: the same seed gives the same month, another seed another; its load is the one
asked for; the trace source reads the shared trace's rules (docs/twin.md, "Sources")."""

from __future__ import annotations

import pytest

from twin.sources.alibaba import trace_read
from twin.sources.catalogue import DEPARTMENTS, department_of, flavor_for, zipf_weights
from twin.sources.generator import GeneratorSpec, workload_generate
from twin.workload import jobs_read, jobs_write

pytestmark = pytest.mark.pure  # no database: runs beside the suite (tests/pure.py)

SPEC = GeneratorSpec(seed=7, days=7, requests=400, installed_gpus=64)


def test_the_same_seed_gives_the_same_workload_and_another_seed_another() -> None:
    first = jobs_write(workload_generate(SPEC))
    assert first == jobs_write(workload_generate(SPEC))
    assert first != jobs_write(workload_generate(GeneratorSpec(seed=8, days=7, requests=400, installed_gpus=64)))
    assert len(jobs_read(first)) == 400


def test_the_month_offers_the_load_asked_for_skewed_between_departments() -> None:
    jobs = workload_generate(SPEC)
    end = 7 * 86400
    offered = sum(job.milli / 1000 * min(job.runtime_s, end - job.submit_at) for job in jobs) / (64 * end)
    assert 1.09 <= offered <= 1.12  # 1.1 asked within the week; run times of at least a minute add a little
    counts = [sum(1 for job in jobs if job.department == name) for name in DEPARTMENTS]
    assert counts[0] > 3 * counts[-1]
    assert all(0 <= job.submit_at <= 7 * 86400 and job.requested_s >= job.runtime_s for job in jobs)


def test_flavors_and_departments_follow_the_documented_rules() -> None:
    assert flavor_for(1, 810)[0] == "share-900" and flavor_for(1, 1000)[0] == "gpu-1" and flavor_for(8, 1000)[0] == "gpu-8"
    assert flavor_for(1, 960)[0] == "gpu-1"  # a share rounded up to a whole GPU is a whole GPU
    weights = zipf_weights(8, 1.0)
    assert abs(sum(weights) - 1) < 1e-12 and weights[0] == max(weights)
    assert department_of("openb-pod-0001", weights) == department_of("openb-pod-0001", weights)


def test_the_trace_maps_qos_shares_and_times() -> None:
    text = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
            "scheduled_time\n"
            "openb-pod-0000,12000,16384,1,1000,,LS,Running,0,7200,100\n"
            "openb-pod-0001,6000,12288,1,460,,BE,Pending,50,4000,\n"
            "openb-pod-0002,6000,12288,0,0,,BE,Running,60,4000,60\n"
            "openb-pod-0003,6000,12288,2,1000,V100M16|V100M32,Guaranteed,Running,70,4000,70\n")
    jobs = trace_read(text, window_days=None)
    assert [(j.priority_class, j.flavor, j.runtime_s, j.requested_s) for j in jobs] == [
        ("gpu-standard", "gpu-1", 7100.0, 7200.0), ("gpu-preemptible", "share-500", 3950.0, 3600.0 * 2),
        ("gpu-production", None, 3930.0, 3600.0 * 2)]
    assert jobs[2].shape.models == frozenset({"V100M16", "V100M32"}) and jobs[1].shape.gpu_milli == 500
    window = trace_read(text, window_days=60 / 86400)  # from 10: the minute before the last creation (70)
    assert [(j.submit_at, j.runtime_s) for j in window] == [(0.0, 7100.0), (40.0, 3950.0), (60.0, 3930.0)]
