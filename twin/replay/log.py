"""The decision log's lines (``twin.replay.decisions``): their kinds, where a unit went (and the
unit as the portal's catalogue counts it), and where the idle ladder's moves and the fair-share
order go in the log."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from placement import Placement
from placement.workload import UnitKey
from twin.workload import Shape

SUBMIT, START, RECLAIM, REFUSED, END, LEAVE, BEGIN = "submit", "start", "reclaim", "refused", "end", "leave", "begin"
RANK = "rank"  # the fair-share order a pass tries departments' waiting requests in
IDLE_WARN, IDLE_ACT, IDLE_END = "idle-warn", "idle-act", "idle-end"  # the idle ladder's moves on a grant
WINDOW = "window"  # a quota window's edge: a department's effective guarantee and limit from now on
SHRINK = "shrink"  # a shrink's reclaim met later: grants in the way at its edge could not be taken then


@dataclass(frozen=True, repr=False)
class Unit:
    """Where one unit went: the node's name, its GPU indices and the thousandths of each it takes;
    for a MIG instance (``mig``) its profile and first memory slice, and no thousandths (0), as the
    portal's reservation row holds it."""

    node: str
    gpus: tuple[int, ...]
    milli: int
    mig: tuple[str, int] | None = None

    def __repr__(self) -> str:  # a unit without MIG reads as it always did (the pinned digests)
        text = f"Unit(node={self.node!r}, gpus={self.gpus!r}, milli={self.milli!r}"
        return text + (f", mig={self.mig!r})" if self.mig is not None else ")")


@dataclass(frozen=True, repr=False)
class Decision:
    """One line of the log. ``piece``: the request's number; ``line``: its workload line;
    ``units``: for ``start`` and ``reclaim``, where its units go; ``victims``: (piece, units)
    for ``reclaim``, and for ``window`` and ``shrink`` what a lower limit took back (shrink policy
    ``reclaim``); ``reason``: ``quota`` or ``capacity`` for ``refused``; ``quantity``: how
    many units it asks (``submit``) or gives back (``leave``); ``order``: for ``rank``, the
    departments by fair-share factor, the least served first, those of equal factor together;
    ``quota``: for ``window``, the department and its effective guarantee and limit from then
    (for ``shrink``, the department and the numbers its pending reclaim was met against);
    ``share``: for those, the priority class whose share of the quota it is (None: the quota
    itself); ``flavor``: for those, the flavor whose quota of the department's it is (None: the
    department's own); ``ahead``: for ``submit``, ``start``, ``reclaim`` and ``refused`` of a
    request booked ahead, the start of the period it is decided over (its ``starts_at``), the
    same request asked again at each try."""

    at: float
    kind: str
    piece: int
    line: int
    quantity: int = 0
    units: tuple[Unit, ...] = ()
    victims: tuple[tuple[int, int], ...] = ()
    reason: str = ""
    order: tuple[tuple[str, ...], ...] = ()
    quota: tuple[str, Decimal, Decimal] | None = None
    share: str | None = None
    flavor: str | None = None
    ahead: float | None = None

    def __repr__(self) -> str:  # as the dataclass writes it; the optional fields only where set (the pinned digests)
        shown = [f for f in dataclasses.fields(self)
                 if f.name not in ("share", "flavor", "ahead") or getattr(self, f.name) is not None]
        return f"Decision({', '.join(f'{f.name}={getattr(self, f.name)!r}' for f in shown)})"


def idle_merged(log: list[Decision], idle: list[Decision]) -> list[Decision]:
    """``log`` with the idle ladder's moves in time order: each at its tick, after the runs that end
    then (and the requests made then), before anything else then; a move on a grant that no longer
    holds by then (it ended, or a reclaim took all its units: the portal's ``reclaiming``) is left
    out, as the portal's evaluation watches only active grants."""
    gone: dict[int, float] = {}  # piece -> when it stops being watched (at or after a reclaim's instant)
    units: dict[int, int] = {}
    for decision in log:
        if decision.kind == SUBMIT:
            units[decision.piece] = decision.quantity
        elif decision.kind in (END, IDLE_END):
            gone.setdefault(decision.piece, decision.at - 1e-9)  # the end comes before the moves then
        for victim, count in decision.victims:  # a reclaim of all of a grant: no longer watched from then
            units[victim] -= count
            if units[victim] <= 0:
                gone.setdefault(victim, decision.at)
    moves = sorted((move for move in idle if move.at <= gone.get(move.piece, float("inf"))),
                   key=lambda move: (move.at, move.kind != IDLE_WARN, move.piece))
    merged: list[Decision] = []
    index = 0
    for decision in log:
        while index < len(moves) and (moves[index].at < decision.at or (
                moves[index].at == decision.at and decision.kind not in (SUBMIT, END))):
            merged.append(moves[index])
            index += 1
        merged.append(decision)
    return [*merged, *moves[index:]]


def fair_share_order(factors: dict[int, float], index: dict[str, int]) -> tuple[tuple[str, ...], ...]:
    """The departments by factor, the highest (least served) first, those of equal factor in one
    group by name; a department without a factor has 1.0."""
    groups: dict[float, list[str]] = {}
    for name, number in index.items():
        groups.setdefault(factors.get(number, 1.0), []).append(name)
    return tuple(tuple(sorted(groups[factor])) for factor in sorted(groups, reverse=True))


def units_of(placements: Sequence[Placement], shape: Shape) -> tuple[Unit, ...]:
    return tuple(Unit(p.node, tuple(p.gpu_indices), 0, (shape.mig_profile, p.mig_starts[0]))
                 if shape.mig_profile is not None and p.mig_starts else Unit(p.node, tuple(p.gpu_indices), shape.gpu_milli)
                 for p in placements)


def unit_key(shape: Shape) -> UnitKey:
    """The unit as the portal's catalogue counts it (one GPU of one model, no CPU or memory:
    the workload format has none; a MIG instance: its profile, no thousandths)."""
    model = next(iter(shape.models)) if len(shape.models) == 1 else ""
    if shape.mig_profile is not None:
        return (0, 0, model, shape.mig_profile, 0)
    return (0, shape.gpu_milli, model, None, 0)
