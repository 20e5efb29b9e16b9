"""A seeded month of demand (docs/twin.md, "The generator", where each distribution's source is
cited). The same ``GeneratorSpec`` gives the same workload, byte for byte.

* **Unit shapes** and **priority classes**: the GPU tasks of the Alibaba trace v2023 default list
  (FGD, ATC'23): of 7,064 GPU tasks, 3,078 share one GPU (most often 810, 470, 320 and 650
  thousandths), 3,911 take one whole GPU, 16 two, 15 four, 44 eight; QoS 4,647 LS, 3,398 BE, 100
  Burstable, 7 Guaranteed (mapped as ``alibaba.QOS_CLASSES``).
* **Run times**: log-normal (a heavy tail: most jobs short, most GPU time in long ones, as Philly,
  ATC'19, and Helios, SC'21, report), σ = ``runtime_sigma``; the scale is solved so that the
  GPU-hours asked within the month (each run up to the month's end) are ``offered_load`` × the
  installed GPUs × its hours; at most ``runtime_cap_days``.
* **Arrivals**: a daily cycle peaking in the afternoon with fewer submissions at weekends (both
  studies show daily cycles of submission), times each department's own campaigns: weeks of heavy
  use alternating with quiet ones, shifted between departments.
* **Departments**: request counts skewed by Zipf weights (``skew``): a few groups dominate demand
  (Philly's virtual clusters, Helios' VCs); guarantees by headcount (equal) unless given.
* **Busy fractions**: Beta(``busy_a``, ``busy_b``), mostly low: PAI (MLaaS in the Wild, NSDI'22)
  reports that most GPU instances use a small part of the GPU they hold.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace

from twin.policy import Policy
from twin.sources.catalogue import DEPARTMENTS, flavor_for, policy_for, zipf_weights
from twin.workload import Job, Shape

DAY = 86400.0
SHARES = ((810, 1078), (470, 750), (320, 328), (650, 253))  # the most common shares of the trace, and their tasks
SHARE_OTHER = 3078 - sum(count for _, count in SHARES)  # the other sharing tasks: any tenth of a GPU
SHAPES = (("share", 3078), (1, 3911), (2, 16), (4, 15), (8, 44))
CLASS_MIX = (("gpu-standard", 4647 + 100), ("gpu-preemptible", 3398), ("gpu-production", 7))


@dataclass(frozen=True)
class GeneratorSpec:
    seed: int = 1
    days: float = 30.0
    requests: int = 50_000
    installed_gpus: int = 1000
    departments: int = 8
    offered_load: float = 1.1  # GPU-hours asked within the month ÷ GPU-hours installed over it
    skew: float = 2.2  # Zipf exponent of the departments' request counts (the largest asks about 70 %)
    diurnal: float = 0.6  # amplitude of the daily cycle (peak ÷ trough = (1 + a) ÷ (1 − a))
    weekend: float = 0.5  # weekend arrivals relative to weekdays
    campaign_days: float = 14.0  # one department's cycle of heavy and quiet use
    campaign_active: float = 0.4  # the heavy part of the cycle
    campaign_ratio: float = 6.0  # heavy ÷ quiet arrival rate
    runtime_sigma: float = 1.5
    runtime_cap_days: float = 7.0
    busy_a: float = 0.6
    busy_b: float = 1.2


def busy_draw(rng: random.Random, a: float = 0.6, b: float = 1.2) -> float:
    return round(rng.betavariate(a, b), 4)


def _weighted(rng: random.Random, items: tuple[tuple[object, int], ...]) -> object:
    return rng.choices([item for item, _ in items], weights=[weight for _, weight in items])[0]


def _shape(rng: random.Random) -> tuple[str, Shape]:
    kind = _weighted(rng, SHAPES)
    if kind != "share":
        return flavor_for(int(str(kind)), 1000)
    if rng.random() < SHARE_OTHER / 3078:
        return flavor_for(1, rng.randrange(50, 950))
    return flavor_for(1, int(str(_weighted(rng, SHARES))))


def intensity(spec: GeneratorSpec, department: int, t: float) -> float:
    """The relative arrival rate of a department at ``t`` seconds (at most 1)."""
    hour = (t % DAY) / 3600
    daily = (1 + spec.diurnal * math.sin(2 * math.pi * (hour - 8) / 24)) / (1 + spec.diurnal)
    weekly = spec.weekend if (t // DAY) % 7 >= 5 else 1.0
    phase = department * spec.campaign_days / spec.departments
    heavy = ((t / DAY + phase) % spec.campaign_days) < spec.campaign_active * spec.campaign_days
    campaign = 1.0 if heavy else 1.0 / spec.campaign_ratio
    return daily * weekly * campaign


def _arrival(rng: random.Random, spec: GeneratorSpec, department: int) -> float:
    while True:  # thinning: uniform times kept in proportion to the intensity
        t = rng.uniform(0, spec.days * DAY)
        if rng.random() < intensity(spec, department, t):
            return t


def _runtimes(rng: random.Random, spec: GeneratorSpec, millis: list[int], arrivals: list[float]) -> list[float]:
    """Log-normal run times scaled so that the GPU-hours the month asks *within the month* (each
    run counted up to the month's end, when it would start at once) meet ``offered_load``: what
    runs past the end is not load the month offers its cluster."""
    draws = [rng.lognormvariate(0.0, spec.runtime_sigma) for _ in millis]
    end = spec.days * DAY
    target = spec.offered_load * spec.installed_gpus * 1000 * end
    cap = spec.runtime_cap_days * DAY
    scale = target / sum(m * d for m, d in zip(millis, draws, strict=True))
    for _ in range(40):  # the cap and the month's end take some GPU-hours off: scale the rest up again
        got = sum(m * min(cap, scale * d, end - t) for m, d, t in zip(millis, draws, arrivals, strict=True))
        if abs(got - target) <= 1e-6 * target:
            break
        scale *= target / got
    return [max(60.0, min(cap, scale * d)) for d in draws]


def workload_generate(spec: GeneratorSpec) -> list[Job]:
    """The month's requests, in submission order."""
    rng = random.Random(spec.seed)
    names = DEPARTMENTS[: spec.departments] if spec.departments <= len(DEPARTMENTS) else tuple(
        f"dept-{k}" for k in range(spec.departments))
    weights = zipf_weights(spec.departments, spec.skew)
    rows = []
    for _ in range(spec.requests):
        department = rng.choices(range(spec.departments), weights=weights)[0]
        flavor, shape = _shape(rng)
        rows.append((department, flavor, shape, _arrival(rng, spec, department), str(_weighted(rng, CLASS_MIX)),
                     rng.randrange(3), busy_draw(rng, spec.busy_a, spec.busy_b), rng.uniform(1.0, 2.0)))
    runtimes = _runtimes(rng, spec, [row[2].milli for row in rows], [row[3] for row in rows])
    jobs = [
        Job(line=index + 1, submit_at=round(t, 3), department=names[d], project=f"{names[d]}-{project}", shape=shape,
            quantity=1, runtime_s=round(runtime, 3), requested_s=3600.0 * math.ceil(runtime * ask / 3600),
            priority_class=cls, busy=busy, flavor=flavor)
        for index, ((d, flavor, shape, t, cls, project, busy, ask), runtime) in enumerate(zip(rows, runtimes, strict=True))
    ]
    ordered = sorted(jobs, key=lambda job: (job.submit_at, job.line))
    return [replace(job, line=index + 1) for index, job in enumerate(ordered)]  # lines as a written file numbers them


def generated_policy(spec: GeneratorSpec, guarantees: list[float] | None = None) -> Policy:
    """Equal guarantees summing to the installed GPUs (by headcount), each department limited to
    the whole cluster."""
    names = DEPARTMENTS[: spec.departments] if spec.departments <= len(DEPARTMENTS) else tuple(
        f"dept-{k}" for k in range(spec.departments))
    shares = guarantees if guarantees is not None else [1.0 / spec.departments] * spec.departments
    return policy_for(names, shares, spec.installed_gpus)
