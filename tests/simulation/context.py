"""What one run carries from step to step: the world, the faults, the ledger's last snapshot, the
instants the timeline task completed at, what each step asked of the invariants, and the counts of
the summary."""

from __future__ import annotations

import datetime
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tests.simulation.faults import Faults
from tests.simulation.ledger import Snapshot
from tests.simulation.world import SimWorld


@dataclass
class Preview:
    """What the placement preview said just before an approval."""

    allocation_id: int
    admitted: bool
    victims: frozenset[int]
    starts: str | None


@dataclass
class StepNotes:
    """What the actions of one step tell the invariants."""

    ticks: list[datetime.datetime] = field(default_factory=list)  # instants the timeline task completed at
    previews: list[tuple[Preview, str]] = field(default_factory=list)  # (preview, what approving did)
    reasons: list[tuple[int, str, str]] = field(default_factory=list)  # (request, why's primary code, what approving did)
    cancelled: list[tuple[int, datetime.datetime, bool]] = field(default_factory=list)  # window, when, was in force
    escaped: list[str] = field(default_factory=list)  # exceptions no service documents
    concurrent: bool = False
    admitted: dict[int, int] = field(default_factory=dict)  # grant -> audit seq of its admission this step


@dataclass
class Context:
    world: SimWorld
    faults: Faults
    snapshot: Snapshot
    notes: StepNotes = field(default_factory=StepNotes)
    step: int = 0
    last_tick: datetime.datetime | None = None
    cancelled_at: dict[int, tuple[datetime.datetime, bool]] = field(default_factory=dict)
    first_seen: dict[int, int] = field(default_factory=dict)  # reservation id -> step it appeared in
    lost_gpus: dict[tuple[int, int], int] = field(default_factory=dict)  # (node, gpu index) -> step it went
    cordoned: dict[int, int] = field(default_factory=dict)  # node id -> step it was cordoned
    obligations: list[dict[str, Any]] = field(default_factory=list)  # shrink edges whose reclaim must be met
    audit_seq: int = 0
    audit_counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    action_counts: Counter[str] = field(default_factory=Counter)
    outcome_counts: Counter[str] = field(default_factory=Counter)
    checks: Counter[str] = field(default_factory=Counter)
