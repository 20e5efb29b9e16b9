"""Capacity at one instant, time-overlap aware, on the live reservations and the inventory:

* a GPU holds at one instant either MIG instances whose memory slices do not overlap (each at a
  start its profile allows) or shares whose thousandths add up to at most 1000, never both;
* a node's CPU and memory are not booked beyond what it has;
* every unit of a holding grant has one live booking; no booking outlives its grant's hold;
* nothing new is booked on a cordoned node or on a GPU the node lost.

A booking holds over its grant's real hold (``Snapshot.active``): a grant waiting for its victims
may be booked on their GPUs, since they leave at their deadline and it starts then.
"""

from __future__ import annotations

import datetime
from collections import defaultdict

from tests.simulation.context import Context
from tests.simulation.ledger import HOLDING, Booking, Snapshot

Found = tuple[str, str]
MIG_SLICES = {"1g.10gb": 1, "1g.20gb": 2, "2g.20gb": 2, "3g.40gb": 4, "4g.40gb": 4, "7g.80gb": 8}
MIG_STARTS = {"1g.10gb": range(7), "1g.20gb": (0, 2, 4, 6), "2g.20gb": (0, 2, 4), "3g.40gb": (0, 4), "4g.40gb": (0,),
              "7g.80gb": (0,)}
Held = tuple[datetime.datetime, datetime.datetime, Booking]


def _overlap(a: Held, b: Held) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def _peak(items: list[Held], value: str) -> tuple[int, datetime.datetime | None]:
    """The most ``value`` (milli, cpu or memory) the items hold at one instant, and when."""
    best, when = 0, None
    for start, _, _ in items:
        total = sum(getattr(b, value) for s, e, b in items if s <= start < e)
        if total > best:
            best, when = total, start
    return best, when


def _gpu(label: str, items: list[Held]) -> list[Found]:
    found: list[Found] = []
    mig = [item for item in items if item[2].mig_profile]
    shares = [item for item in items if not item[2].mig_profile]
    for _, _, booking in mig:
        size = MIG_SLICES.get(booking.mig_profile)
        if size is None or booking.mig_start not in MIG_STARTS[booking.mig_profile]:
            found.append(("capacity", f"{label}: {booking.mig_profile} of #{booking.allocation_id} at memory slice "
                          f"{booking.mig_start}, a start its profile does not allow"))
    for index, first in enumerate(mig):
        for second in mig[index + 1:]:
            a, b = first[2], second[2]
            if a.mig_start is None or b.mig_start is None or not _overlap(first, second):
                continue
            if a.mig_start < b.mig_start + MIG_SLICES.get(b.mig_profile, 1) and b.mig_start < a.mig_start + MIG_SLICES.get(a.mig_profile, 1):
                found.append(("capacity", f"{label}: {a.mig_profile}@{a.mig_start} of #{a.allocation_id} and "
                              f"{b.mig_profile}@{b.mig_start} of #{b.allocation_id} share memory slices while both hold"))
    for first in mig:
        for second in shares:
            if _overlap(first, second):
                found.append(("capacity", f"{label}: MIG instance of #{first[2].allocation_id} and a whole or shared "
                              f"GPU of #{second[2].allocation_id} at the same instant"))
    peak, when = _peak(shares, "milli")
    if peak > 1000:
        holders = sorted({b.allocation_id for s, e, b in shares if when is not None and s <= when < e})
        found.append(("capacity", f"{label}: {peak}/1000 booked at {when} by {holders}"))
    return found


def capacity(ctx: Context, snap: Snapshot) -> list[Found]:
    found: list[Found] = []
    per_gpu: dict[tuple[int, int], list[Held]] = defaultdict(list)
    per_node: dict[int, list[Held]] = defaultdict(list)
    units: dict[int, int] = defaultdict(int)
    for booking in snap.bookings.values():
        ctx.first_seen.setdefault(booking.id, ctx.step)
        grant = snap.grants[booking.allocation_id]
        units[grant.id] += 1
        span = snap.active(grant)
        if grant.state not in HOLDING:
            found.append(("booking-leak", f"#{grant.id} is {grant.state} but its unit booking {booking.id} is live"))
            continue
        if span is None:
            continue
        node = snap.nodes[booking.node_id]
        new = ctx.first_seen[booking.id] == ctx.step and ctx.step > 0
        for index in booking.gpus:
            lost = ctx.lost_gpus.get((booking.node_id, index))
            if index not in node.gpus and (lost is None or ctx.first_seen[booking.id] > lost):
                found.append(("capacity", f"#{grant.id} booked on {node.name} gpu{index}, which the node does not have"))
            per_gpu[(booking.node_id, index)].append((span[0], snap.booking_end(booking, span[1]), booking))
        if new and not node.schedulable and ctx.cordoned.get(booking.node_id, ctx.step) < ctx.step:
            found.append(("capacity", f"#{grant.id} newly booked on cordoned node {node.name}"))
        per_node[booking.node_id].append((span[0], snap.booking_end(booking, span[1]), booking))
    for (node_id, index), items in sorted(per_gpu.items()):
        found += _gpu(f"{snap.nodes[node_id].name} gpu{index}", items)
    for node_id, items in sorted(per_node.items()):
        node = snap.nodes[node_id]
        for value, have in (("cpu", node.cpu), ("memory", node.memory)):
            peak, when = _peak(items, value)
            if peak > have:
                found.append(("capacity", f"{node.name}: {value} {peak} booked at {when}, the node has {have}"))
    for grant in snap.grants.values():
        if grant.state in HOLDING and grant.cluster_id is not None and units[grant.id] != grant.quantity:
            found.append(("booking-count", f"#{grant.id} ({grant.state}) holds {grant.quantity} units but has "
                          f"{units[grant.id]} live bookings"))
    return found


def inventory_moves(ctx: Context, prev: Snapshot, snap: Snapshot) -> None:
    """Remember when a GPU went missing and when a node was cordoned (bookings older than that stay)."""
    for node_id, node in snap.nodes.items():
        before = prev.nodes.get(node_id)
        if before is not None:
            for index in before.gpus - node.gpus:
                ctx.lost_gpus[(node_id, index)] = ctx.step
            for index in node.gpus - before.gpus:
                ctx.lost_gpus.pop((node_id, index), None)
        if not node.schedulable and (before is None or before.schedulable):
            ctx.cordoned[node_id] = ctx.step
        if node.schedulable:
            ctx.cordoned.pop(node_id, None)
