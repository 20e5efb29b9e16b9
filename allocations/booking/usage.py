"""What reservation rows hold over time, per GPU and per node, as the placement engine's pictures
need it (``allocations.booking.view``).

A row holds its GPUs (a share, or a MIG instance), CPU and memory over its allocation's interval.
A picture for an interval shows, per GPU and node, the most that is held at one instant: rows that
never hold at the same instant (two grants booked one after the other on one MIG slice) do not add
up, rows that do add up, and a unit placed beside them over all of their spans fits at every
instant (``placement.peaks``; for MIG instances ``MigGeometry.held``).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from django.db.models import F, QuerySet

from allocations.models import Allocation, Reservation
from placement import MigSlice
from placement.peaks import ALWAYS, Span, at_one_instant, sweep


@dataclass
class GpuUse:
    """What live reservations hold on one GPU: the most share held at one instant, and the MIG
    instances, each with the span it is held (``MigGeometry.held`` finds what they occupy)."""

    milli: int = 0
    slices: list[MigSlice] = field(default_factory=list)


Usage = tuple[dict[tuple[int, int], GpuUse], Counter[int], Counter[int]]


def with_spans(rows: QuerySet[Reservation]) -> QuerySet[Reservation]:
    """``rows`` read with when each holds what it books: its allocation's interval (:func:`row_spans`)."""
    return rows.annotate(kept_starts=F("allocation__starts_at"), kept_ends=F("allocation__ends_at"))


def row_spans(rows: Sequence[Reservation]) -> list[Span]:
    """When each row holds what it books: its allocation's interval ``[starts_at, ends_at)``, read
    with the row (:func:`with_spans`) or with its allocation, else in one query for the rows that
    have neither. A row of no allocation yet (a unit being placed) holds at every instant."""
    spans: list[Span | None] = []
    unknown: set[int] = set()
    for row in rows:
        starts = getattr(row, "kept_starts", None)
        if starts is not None:
            spans.append((starts.timestamp(), row.kept_ends.timestamp()))  # type: ignore[attr-defined]
        elif Reservation.allocation.is_cached(row):
            spans.append((row.allocation.starts_at.timestamp(), row.allocation.ends_at.timestamp()))
        elif row.allocation_id is not None:
            spans.append(None)
            unknown.add(row.allocation_id)
        else:
            spans.append(ALWAYS)
    if not unknown:
        return [span or ALWAYS for span in spans]
    read = {pk: (starts.timestamp(), ends.timestamp()) for pk, starts, ends in
            Allocation.objects.filter(pk__in=unknown).values_list("pk", "starts_at", "ends_at")}
    return [span or read.get(row.allocation_id, ALWAYS) for span, row in zip(spans, rows, strict=True)]


def reservation_usage(reservations: Iterable[Reservation]) -> Usage:
    """What ``reservations`` hold per GPU and per node's CPU and memory, at the instant each holds
    the most: rows that never hold at the same instant do not add up, those that do add up
    (``placement.peaks``). A unit placed beside them over all of their spans fits
    at every instant."""
    rows = list(reservations)
    by_node: dict[int, list[tuple[Reservation, Span]]] = defaultdict(list)
    for row, span in zip(rows, row_spans(rows), strict=True):
        by_node[row.node_id].append((row, span))
    per_gpu: dict[tuple[int, int], GpuUse] = defaultdict(GpuUse)
    cpu: Counter[int] = Counter()
    memory: Counter[int] = Counter()
    for node, held in by_node.items():
        amounts: list[tuple[int, int, list[tuple[tuple[int, int], int]]]] = []
        for row, span in held:
            shares = []
            for index in row.gpu_indices:
                if row.mig_profile:
                    per_gpu[(node, int(index))].slices.append(MigSlice(row.mig_profile, int(row.mig_start or 0), span))
                else:
                    shares.append(((node, int(index)), row.gpu_milli))
            amounts.append((row.cpu_millicores, row.memory_mib, shares))
        if at_one_instant([span for _, span in held]):  # the common case: every row here holds now
            cpu[node], memory[node] = sum(amount[0] for amount in amounts), sum(amount[1] for amount in amounts)
            for _, _, shares in amounts:
                for key, milli in shares:
                    per_gpu[key].milli += milli
        else:
            cpu[node], memory[node] = _most_at_once(amounts, sweep([span for _, span in held]), per_gpu)
    return per_gpu, cpu, memory


def _most_at_once(
    amounts: list[tuple[int, int, list[tuple[tuple[int, int], int]]]], order: list[tuple[int, bool]],
    per_gpu: dict[tuple[int, int], GpuUse],
) -> tuple[int, int]:
    """One node's rows (CPU, memory, shares per GPU) taken and given back in ``order``: the most
    CPU and memory held at once, and each GPU's most share (written to ``per_gpu``)."""
    cpu = memory = most_cpu = most_memory = 0
    share: dict[tuple[int, int], int] = defaultdict(int)
    for position, begins in order:
        row_cpu, row_memory, shares = amounts[position]
        if not begins:
            cpu, memory = cpu - row_cpu, memory - row_memory
            for key, milli in shares:
                share[key] -= milli
            continue
        cpu, memory = cpu + row_cpu, memory + row_memory
        most_cpu, most_memory = max(most_cpu, cpu), max(most_memory, memory)
        for key, milli in shares:
            share[key] += milli
            if share[key] > per_gpu[key].milli:
                per_gpu[key].milli = share[key]
    return most_cpu, most_memory
