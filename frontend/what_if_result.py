"""A what-if's result as the page shows it: per department, each figure current, proposed and the
difference; its allocation over time under both (the utilisation page's chart: held and busy
GPU-equivalents); how long its requests waited, binned; and which level of its quota chain held
its waiting demand back, in the words the replay stored."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from django.utils.safestring import SafeString

from frontend.charts import ChartBucket, meter, utilisation_chart
from whatifs.models import WhatIf, WorkloadSource

LABELS = {
    "allocation_pct": "Allocation (% of installed)", "busy_pct": "Busy (% of installed)", "work_gpu_h": "Work served (GPU-h)",
    "wait_p50_min": "Wait p50 (min)", "wait_p95_min": "Wait p95 (min)", "wait_p99_min": "Wait p99 (min)",
    "violations_gpu_h": "Guarantee violations (GPU-h)", "reclaims": "Reclaimed runs", "lost_gpu_h": "Lost to reclaims (GPU-h)",
    "requests": "Requests",
}
LOWER_IS_BETTER = {"wait_p50_min", "wait_p95_min", "wait_p99_min", "violations_gpu_h", "reclaims", "lost_gpu_h"}


@dataclass(frozen=True)
class FigureRow:
    label: str
    current: float
    proposed: float
    difference: float
    better: bool | None  # None: unchanged


@dataclass(frozen=True)
class WaitRow:
    label: str
    current: int
    proposed: int
    current_bar: SafeString
    proposed_bar: SafeString


@dataclass(frozen=True)
class LevelRow:
    """One level of the department's quota chain (or the GPUs, or a reclaim's notice) and the share
    of the GPU-hours waiting it held back, under each policy, as the replay recorded them."""

    label: str
    current_pct: float
    proposed_pct: float


@dataclass(frozen=True)
class HeldBack:
    current: str
    proposed: str
    levels: list[LevelRow]


@dataclass(frozen=True)
class DepartmentView:
    name: str
    rows: list[FigureRow]
    current_chart: SafeString
    proposed_chart: SafeString
    waits: list[WaitRow]
    held_back: HeldBack | None = None  # None: stored before the replay recorded it


def _rows(row: dict[str, Any], figures: list[str]) -> list[FigureRow]:
    out = []
    for key in figures:
        difference = row["difference"][key]
        better = None if abs(difference) < 1e-9 else (difference < 0) == (key in LOWER_IS_BETTER)
        out.append(FigureRow(LABELS.get(key, key), row["current"][key], row["proposed"][key], difference, better))
    return out


def _origin(what_if: WhatIf, horizon: float) -> datetime.datetime:
    if what_if.source == WorkloadSource.HISTORY and what_if.history_until is not None:
        return what_if.history_until - datetime.timedelta(seconds=horizon)
    return what_if.created_at  # a file's seconds, drawn from when the what-if was asked for


def _chart(series: dict[str, list[float]], *, origin: datetime.datetime, step: float, title: str, ident: str) -> SafeString:
    buckets = [ChartBucket(start=origin + datetime.timedelta(seconds=i * step),
                           end=origin + datetime.timedelta(seconds=(i + 1) * step),
                           allocated=held, used=busy, unknown=0.0)
               for i, (held, busy) in enumerate(zip(series["held"], series["busy"], strict=True))]
    return utilisation_chart(buckets=buckets, title=title, chart_id=ident)


def _bin_label(edges: list[float], index: int) -> str:
    low = edges[index]
    if index + 1 == len(edges):
        return f"{low:g} min or more"
    return f"under {edges[1]:g} min" if index == 0 else f"{low:g} to {edges[index + 1]:g} min"


def _waits(result: dict[str, Any], name: str) -> list[WaitRow]:
    edges = result["wait_bins_min"]
    current, proposed = result["current"]["waits"][name], result["proposed"]["waits"][name]
    most = max([*current, *proposed, 1])
    return [WaitRow(_bin_label(edges, i), c, p, meter(used=c, total=most, label=f"current: {c}"),
                    meter(used=p, total=most, label=f"proposed: {p}"))
            for i, (c, p) in enumerate(zip(current, proposed, strict=True))]


LEVEL_LABELS = {"own": "{}'s own limit", "parent": "{}'s limit", "window": "{}'s limit (a quota window)",
                "organisation": "the organisation's limit", "capacity": "no room on the GPUs",
                "notice": "reclaimed grants' notice"}


def _level_label(kind: str, department: str, flavor: str) -> str:
    if flavor:  # a department's quota of a flavor
        return f"{department}'s quota of {flavor}" + (" (a quota window)" if kind == "window" else "")
    return LEVEL_LABELS.get(kind, kind).format(department)


def _held_back(row: dict[str, Any]) -> HeldBack | None:
    """The words and shares the replay stored (``whatifs.compare.binding_of``), side by side."""
    binding = row.get("binding")
    if not binding:
        return None
    shares: dict[tuple[str, str, str], list[float]] = {}
    for index, side in enumerate(("current", "proposed")):
        for level in binding[side]["levels"]:
            key = (level["kind"], level["department"], level.get("flavor", ""))
            shares.setdefault(key, [0.0, 0.0])[index] = level["pct"]
    levels = [LevelRow(_level_label(kind, department, flavor), current, proposed)
              for (kind, department, flavor), (current, proposed) in shares.items()]
    return HeldBack(binding["current"]["words"], binding["proposed"]["words"], levels)


def result_view(what_if: WhatIf) -> list[DepartmentView]:
    """Each department's comparison (empty until the what-if is done)."""
    result = what_if.result
    if not result or "departments" not in result:
        return []
    step, figures = result["series_step_s"], result["figures"]
    origin = _origin(what_if, result["horizon_s"])
    views = []
    for row in result["departments"]:
        name = row["department"]
        views.append(DepartmentView(
            name=name, rows=_rows(row, figures),
            current_chart=_chart(result["current"]["series"][name], origin=origin, step=step,
                                 title=f"{name}: GPU-equivalents held, current policy", ident=f"wi-{name}-current"),
            proposed_chart=_chart(result["proposed"]["series"][name], origin=origin, step=step,
                                  title=f"{name}: GPU-equivalents held, proposed", ident=f"wi-{name}-proposed"),
            waits=_waits(result, name), held_back=_held_back(row),
        ))
    return views
