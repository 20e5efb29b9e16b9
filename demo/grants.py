"""Demo grants for ``manage.py seed_demo``: today's state of the demo organisation, written once,
through the services (four-eyes: a researcher requests, the department's admin decides), only
while the database holds no allocation at all. Each was asked for and approved when its story
says (a grant on the cluster as its week of readings in ``demo.usage`` begins), its steps played in
one time order with ``demo.history``'s released, rejected and withdrawn requests (``demo.play``).

Today: ``vision`` borrows: it holds 9.9 GPU-equivalents against a guarantee of 8 (whole H100s,
HAMi vGPU shares of an H100 and, newest, three MIG 3g.40gb slices: 1.5, beyond the guarantee).
``nlp`` holds 3 whole A100s and a quarter of an H100 (an MPS share for a notebook, which has sat
idle for the last hours: ``demo.idle`` warns it), and has two MIG 1g.10gb slices booked for a
distillation run that starts in two days (``scheduled``). Two requests wait for a decision: dave's
time-sliced H100s (erin decides) and alice's 4 more A100s (bob decides), which stay within
``nlp``'s guarantee of 8 but not within the organisation's limit of 16: approving them reclaims
vision's borrowed slices, with 15 minutes' notice (bob sees that on the approvals page and in
``GET /api/v1/allocations/{id}/placement-preview/`` before he approves).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from django.contrib.auth.models import User

from allocations.grants.services import allocation_approve, allocation_request
from allocations.models import Allocation, Flavor, PriorityClass
from demo.history import DEMO_HISTORY, DEMO_TURNED_AWAY, demo_history_steps
from demo.play import DAY, HOUR, Step, allocation_rows_date, steps_play
from demo.usage import demo_usage_start
from kernel.clock import clock_now
from tenants.models import Project


@dataclass(frozen=True)
class Grant:
    requester: str
    decider: str | None  # None: left pending
    project: str
    flavor: str
    quantity: int
    justification: str
    starts_in_days: int = 0  # > 0: approved ahead of its start (scheduled)
    days: int = 30


# In the order they are made: vision's MIG slices last, so they are its newest grant (the one a
# reclaim takes first).
DEMO_GRANTS: list[Grant] = [
    Grant("dave", "erin", "vision-seg", "h100-80gb", 4, "Segmentation model training"),
    Grant("dave", "erin", "vision-seg", "h100-80gb", 4, "Hyper-parameter sweep"),
    Grant("dave", "erin", "vision-seg", "h100-vgpu-10gb", 2, "Inference service for the annotation tool"),
    Grant("dave", "erin", "vision-seg", "a100-mig-3g-40gb", 3, "Inference experiments (borrowed capacity)"),
    Grant("alice", "bob", "nlp-llm", "a100-80gb", 3, "Fine-tuning runs"),
    Grant("alice", "bob", "nlp-llm", "h100-mps-4", 1, "Interactive notebook for data exploration"),
    Grant("alice", "bob", "nlp-speech", "a100-mig-1g-10gb", 2, "Distillation of the speech model", starts_in_days=2,
          days=5),
    Grant("dave", None, "vision-seg", "h100-timeslice-2", 2, "Workshop notebooks for the summer students", days=14),
    Grant("alice", None, "nlp-llm", "a100-80gb", 4, "Evaluation of the new checkpoints (reclaims vision's borrowed slices)"),
    # Within nlp's own quotas but over acme's, the parent's, and nothing it may reclaim frees enough:
    # its page, `gpuportal why` and the API say so with acme's numbers (docs/pending.md).
    Grant("alice", None, "nlp-speech", "a100-80gb", 5, "Speech pre-training burst (more than acme has left)", days=2),
]


def _moments(grant: Grant, now: datetime.datetime) -> tuple[datetime.datetime, datetime.datetime | None]:
    """When the grant was asked for and when it starts (``None``: when it is approved). A grant on
    the cluster was asked for an hour before its week of readings (``demo.usage``'s profile) and
    approved as it began; the scheduled one was asked for yesterday; the pending ones an hour ago."""
    if grant.starts_in_days:
        return now - DAY, now + grant.starts_in_days * DAY
    if grant.decider is None:
        return now - HOUR, None
    starts = demo_usage_start(grant.justification, now)
    return starts - HOUR, starts


def _grant_steps(grant: Grant, now: datetime.datetime, standard: PriorityClass) -> list[Step]:
    asked, starts_at = _moments(grant, now)
    on_cluster = starts_at is not None and starts_at <= now
    decided = starts_at if on_cluster and starts_at is not None else asked + HOUR  # approved as it begins, or an hour on
    made: list[int] = []

    def request() -> None:
        allocation = allocation_request(
            actor=User.objects.get(username=grant.requester), project=Project.objects.get(slug=grant.project),
            flavor=Flavor.objects.get(name=grant.flavor), quantity=grant.quantity, priority_class=standard,
            starts_at=starts_at, ends_at=(starts_at or asked) + grant.days * DAY, justification=grant.justification,
        )  # fmt: skip
        made.append(allocation.pk)
        allocation_rows_date(allocation.pk, asked, created=True)

    def approve() -> None:
        assert grant.decider is not None
        allocation_approve(actor=User.objects.get(username=grant.decider), allocation_id=made[0],
                           comment="Approved for the demo")  # fmt: skip
        allocation_rows_date(made[0], decided)

    return [Step(asked, request)] + ([Step(decided, approve)] if grant.decider is not None else [])


def demo_grants_seed(*, now: datetime.datetime | None = None) -> int:
    """Create the demo's history and grants unless any allocation exists, each step at the moment
    it stands for (``demo.play``); returns how many were created."""
    if Allocation.objects.exists():
        return 0
    moment = now or clock_now()
    standard = PriorityClass.objects.get(name="gpu-standard")
    steps = demo_history_steps(now=moment)
    for grant in DEMO_GRANTS:
        steps += _grant_steps(grant, moment, standard)
    steps_play(steps)
    return len(DEMO_HISTORY) + len(DEMO_TURNED_AWAY) + len(DEMO_GRANTS)
