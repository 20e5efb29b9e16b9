"""Current policy against proposed, on the same demand: two replays of the twin's full policy
and what each did per department, their differences and the series the result page charts.

No Django: plain values in, JSON-ready values out (``comparison_run``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from placement import Node
from twin.policy import Policy
from twin.replay.binding import CAPACITY, NOTICE, ORGANISATION, OWN, WINDOW, Binding, Level, binding_replay
from twin.replay.engine import Outcome
from twin.replay.metrics import Share, measure
from twin.workload import Job

POLICY = "full"  # the portal's own rules
SERIES_POINTS = 48
WAIT_BINS_MIN = (0.0, 1.0, 5.0, 15.0, 60.0, 240.0, 1440.0)  # lower edges, minutes; the last is open
FIGURES = ("allocation_pct", "busy_pct", "work_gpu_h", "wait_p50_min", "wait_p95_min", "wait_p99_min",
           "violations_gpu_h", "reclaims", "lost_gpu_h", "requests")


@dataclass(frozen=True)
class Demand:
    """The requests and the nodes; ``horizon``: the seconds measured (a history's window; None:
    to the last arrival, as the twin measures a file)."""

    jobs: Sequence[Job]
    nodes: Sequence[Node]
    horizon: float | None = None


def _figures(share: Share) -> dict[str, float]:
    return {
        "allocation_pct": round(100 * share.allocation, 3), "busy_pct": round(100 * share.busy, 3),
        "work_gpu_h": round(share.work_gpu_h, 3), "wait_p50_min": round(share.waits.p50 / 60, 2),
        "wait_p95_min": round(share.waits.p95 / 60, 2), "wait_p99_min": round(share.waits.p99 / 60, 2),
        "violations_gpu_h": round(share.violations_gpu_h, 3), "reclaims": share.reclaims,
        "lost_gpu_h": round(share.lost_gpu_h, 3), "requests": share.waits.count,
    }


def _difference(current: dict[str, float], proposed: dict[str, float]) -> dict[str, float]:
    return {key: round(proposed[key] - current[key], 3) for key in FIGURES}


def allocation_series(outcome: Outcome, points: int = SERIES_POINTS) -> dict[str, dict[str, list[float]]]:
    """Per department, the GPU-equivalents it held (``held``) and the part of them busy (``busy``),
    averaged over each of ``points`` equal steps of the measured window."""
    horizon = outcome.horizon or 1.0
    step = horizon / points
    held = [[0.0] * points for _ in outcome.departments]
    busy = [[0.0] * points for _ in outcome.departments]
    for run in outcome.runs:
        begin, end = max(run.start, 0.0), min(run.end, horizon)
        for index in range(int(begin // step), min(points, int(end // step) + 1)):
            overlap = min(end, (index + 1) * step) - max(begin, index * step)
            if overlap > 0:
                held[run.department - 1][index] += run.held * overlap / step
                busy[run.department - 1][index] += run.native * run.busy * overlap / step
    return {name: {"held": [round(v, 3) for v in held[i]], "busy": [round(v, 3) for v in busy[i]]}
            for i, name in enumerate(outcome.departments)}


def wait_histogram(outcome: Outcome) -> dict[str, list[int]]:
    """How many requests of each department waited within each bin of ``WAIT_BINS_MIN``."""
    counts = {name: [0] * len(WAIT_BINS_MIN) for name in outcome.departments}
    for record in outcome.records:
        started = record.first_start if record.first_start is not None else outcome.stop
        minutes = max(0.0, started - record.job.eligible_at) / 60
        index = max(i for i, edge in enumerate(WAIT_BINS_MIN) if minutes >= edge)
        counts[outcome.departments[record.department - 1]][index] += 1
    return counts


def _level_words(level: Level) -> str:
    if level.flavor:  # a department's quota of a flavor
        quota = f"{level.department}'s quota of {level.flavor}"
        return f"{quota} as a quota window set it" if level.kind == WINDOW else quota
    if level.kind == OWN:
        return f"{level.department}'s own limit"
    if level.kind == WINDOW:
        return f"{level.department}'s limit as a quota window set it"
    if level.kind == ORGANISATION:
        return "the organisation's limit (the GPUs installed)"
    if level.kind == CAPACITY:
        return "the GPUs (no room on them)"
    if level.kind == NOTICE:
        return "the notice of grants reclaimed for it"
    return f"{level.department}'s limit"


def _percent(pct: float) -> str:
    """A whole percent, or ``under 1 %`` for a share that rounds to 0 but is not (nor to 100 but is not)."""
    if 0 < pct < 0.5:
        return "under 1 %"
    if 99.5 <= pct < 100:
        return "over 99 %"
    return f"{pct:.0f} %"


def binding_of(binding: Binding, name: str, p95_min: float) -> dict[str, Any]:
    """Which level held the department's waiting demand back: each level's GPU-hours waiting and
    share of them (``twin.replay.binding``), and the sentence the page and the CLI print."""
    levels = binding.levels(name)
    total = sum(level.gpu_h for level in levels)
    shares = [round(100 * level.gpu_h / total, 1) if total else 0.0 for level in levels]
    rows: list[dict[str, Any]] = [
        {"kind": level.kind, "department": level.department, "gpu_h": round(level.gpu_h, 3), "pct": share,
         **({"flavor": level.flavor} if level.flavor else {})}
        for level, share in zip(levels, shares, strict=True)]
    if not total:
        return {"waiting_gpu_h": 0.0, "levels": rows, "words": f"{name}: no demand waited"}
    ranked = sorted(zip(levels, shares, strict=True), key=lambda pair: -pair[0].gpu_h)
    parts = [f"{_level_words(level)} {_percent(share)}" for level, share in ranked]
    parts[0] = f"{_level_words(ranked[0][0])} bound {_percent(ranked[0][1])} of the GPU-hours waiting"
    words = f"{name}: waited {p95_min:,.0f} min at p95; {', '.join(parts)}"
    return {"waiting_gpu_h": round(total, 3), "levels": rows, "words": words}


def _side(outcome: Outcome, binding: Binding) -> tuple[dict[str, Any], dict[str, dict[str, float]]]:
    metrics = measure(outcome)
    per_department = {share.name: _figures(share) for share in metrics.departments}
    held_back = {name: binding_of(binding, name, figures["wait_p95_min"]) for name, figures in per_department.items()}
    summary = {"total": _figures(metrics.total), "jain": round(metrics.jain, 4), "wall_s": round(outcome.wall_s, 3),
               "idle_warnings": metrics.idle_warnings, "idle_reclaims": metrics.idle_reclaims,
               "window_edges": metrics.window_edges, "shrink_reclaims": metrics.shrink_reclaims,
               "series": allocation_series(outcome), "waits": wait_histogram(outcome), "binding": held_back}
    return summary, per_department


def booked_ahead(jobs: Sequence[Job]) -> int:
    """How many requests asked for a later start than their submission: both sides of the twin
    decide such a request at its submission, over its own period, as the portal approves it ahead
    of its start (docs/twin.md, "Booking ahead"); a result says how many there were."""
    return sum(1 for job in jobs if job.starts_at is not None and job.starts_at > job.submit_at)


def comparison_run(demand: Demand, current: Policy, proposed: Policy, *,
                   progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Replay ``demand`` under both policies; the result as stored with the what-if."""
    report = progress or (lambda _: None)
    report(10)
    before, before_departments = _side(*binding_replay(demand.jobs, demand.nodes, current, POLICY,
                                                       horizon=demand.horizon))
    report(55)
    after, after_departments = _side(*binding_replay(demand.jobs, demand.nodes, proposed, POLICY,
                                                     horizon=demand.horizon))
    report(95)
    horizon = demand.horizon if demand.horizon is not None else max((job.eligible_at for job in demand.jobs), default=0.0)
    departments = [
        {"department": name, "current": before_departments[name], "proposed": after_departments[name],
         "difference": _difference(before_departments[name], after_departments[name]),
         "binding": {"current": before["binding"][name], "proposed": after["binding"][name]}}
        for name in before_departments
        if before_departments[name]["requests"] or after_departments[name]["requests"]
        or before_departments[name]["allocation_pct"] or after_departments[name]["allocation_pct"]
    ]
    shown = {row["department"] for row in departments}
    for side in (before, after):
        del side["binding"]  # per department, with its row
        side["series"] = {name: values for name, values in side["series"].items() if name in shown}
        side["waits"] = {name: values for name, values in side["waits"].items() if name in shown}
    return {
        "policy": POLICY, "requests": len(demand.jobs), "installed_gpus": sum(len(node.gpus) for node in demand.nodes),
        "booked_ahead": booked_ahead(demand.jobs),
        "figures": list(FIGURES), "departments": departments,
        "total": {"current": before["total"], "proposed": after["total"],
                  "difference": _difference(before.pop("total"), after.pop("total"))},
        "current": before, "proposed": after, "wait_bins_min": list(WAIT_BINS_MIN),
        "horizon_s": horizon, "series_step_s": horizon / SERIES_POINTS,
    }
