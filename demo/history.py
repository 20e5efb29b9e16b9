"""The demo's past: grants that ran and were released, a request that was rejected and one that
was withdrawn, so that ``make run`` opens allocation lists, the audit log, usage and accounting
with a history behind today's grants (``demo.grants``).

Each is made through the services, as people would (a researcher requests, the department's
admin decides, the researcher releases), and then dated back to when its story happened: its
period, decision and bookings move into the past (the audit events keep the time they were
written, as for ``demo.usage``'s week). They are made first, so that their approvals find quota
and capacity free; released, they hold nothing today.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from django.contrib.auth.models import User
from django.db import transaction

from allocations.grants.services import allocation_approve, allocation_reject, allocation_release, allocation_request
from allocations.models import Allocation, Flavor, PriorityClass, Reservation
from kernel.clock import clock_now
from tenants.models import Project

DAY = datetime.timedelta(days=1)


@dataclass(frozen=True)
class Past:
    requester: str
    decider: str
    project: str
    flavor: str
    quantity: int
    justification: str
    outcome: str  # "released", "rejected" or "cancelled"
    started_days_ago: float  # when it was requested and (released) began
    ended_days_ago: float  # when it was released, rejected or withdrawn
    planned_days: int = 14  # the period asked for
    comment: str = ""


# The released grants' justifications have utilisation profiles in demo.usage (busy while they ran).
DEMO_HISTORY: list[Past] = [
    Past("alice", "bob", "nlp-speech", "a100-mig-1g-10gb", 7, "Tokeniser sweeps on small MIG slices", "released",
         9, 4, comment="Sweeps done, results in the team wiki"),
    Past("dave", "erin", "vision-seg", "h100-timeslice-2", 2, "Annotation tool demos on shared H100s", "released",
         8, 2, comment="The demo week is over"),
    Past("alice", "bob", "nlp-llm", "a100-80gb", 2, "Baseline reproduction", "released", 10, 6,
         comment="Baselines reproduced"),
    Past("dave", "erin", "vision-seg", "h100-vgpu-10gb", 8, "Batch inference for every camera feed", "rejected",
         5, 5, comment="Eight vGPUs for a batch job: run it on two whole H100s at night instead"),
    Past("alice", "bob", "nlp-llm", "h100-mps-4", 2, "Second notebook for a student", "cancelled", 3, 3),
]


def _date_back(allocation: Allocation, past: Past, now: datetime.datetime) -> None:
    began = now - past.started_days_ago * DAY
    ended = now - past.ended_days_ago * DAY
    decided = began + datetime.timedelta(hours=2) if past.outcome != "cancelled" else None
    Allocation.objects.filter(pk=allocation.pk).update(
        created_at=began, starts_at=began, ends_at=began + past.planned_days * DAY,
        original_ends_at=began + past.planned_days * DAY if past.outcome == "released" else None,
        decided_at=min(decided, ended) if decided is not None else None, updated_at=ended,
    )  # fmt: skip
    Reservation.objects.filter(allocation=allocation).update(created_at=began, released_at=ended)


def demo_history_seed(*, now: datetime.datetime | None = None) -> int:
    """Create the past grants (the caller checks that no allocation exists); returns how many."""
    moment = now or clock_now()
    standard = PriorityClass.objects.get(name="gpu-standard")
    for past in DEMO_HISTORY:
        requester = User.objects.get(username=past.requester)
        decider = User.objects.get(username=past.decider)
        allocation = allocation_request(
            actor=requester, project=Project.objects.get(slug=past.project), flavor=Flavor.objects.get(name=past.flavor),
            quantity=past.quantity, priority_class=standard, starts_at=None, ends_at=moment + past.planned_days * DAY,
            justification=past.justification,
        )  # fmt: skip
        if past.outcome == "released":
            allocation_approve(actor=decider, allocation_id=allocation.pk, comment="Approved")
            allocation_release(actor=requester, allocation_id=allocation.pk, comment=past.comment)
        elif past.outcome == "rejected":
            allocation_reject(actor=decider, allocation_id=allocation.pk, comment=past.comment)
        else:
            allocation_release(actor=requester, allocation_id=allocation.pk)  # a pending request is withdrawn
        with transaction.atomic():
            _date_back(allocation, past, moment)
    return len(DEMO_HISTORY)
