"""The demo's past: grants that ran and were released, a request that was rejected and one that
was withdrawn, so that ``make run`` opens allocation lists, the audit log, usage and accounting
with a history behind today's grants (``demo.grants``).

Each is made through the services, as people would (a researcher requests, the department's
admin decides two hours later, the researcher releases), each step at the moment it stands for
(``demo.play``: the audit events and the timelines carry those moments). Released, they hold
nothing today.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from django.contrib.auth.models import User

from allocations.grants.services import allocation_approve, allocation_reject, allocation_release, allocation_request
from allocations.models import Flavor, PriorityClass
from demo.play import DAY, Step, allocation_rows_date
from tenants.models import Project

DECISION_DELAY = datetime.timedelta(hours=2)


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


# Last week's demand beyond nlp's room, turned away: bob rejected three requests for 12 more GPUs.
# With vision's grants, acme's limit of 16 binds before nlp's own 12, so the what-if "raise nlp's
# limit by 4 for last week" changes nothing, and raising nlp's and acme's limits by 4 together lets
# them in sooner (docs/twin.md, "What-if").
OVER_LIMIT = "Over nlp's limit of 12 GPU-equivalents this week; ask again once the fine-tuning runs end"
DEMO_TURNED_AWAY: list[Past] = [
    Past("alice", "bob", "nlp-llm", "a100-80gb", 4, "Ablations of the tokenizer change", "rejected", 5.5, 5.5,
         planned_days=3, comment=OVER_LIMIT),
    Past("alice", "bob", "nlp-llm", "a100-80gb", 4, "Long-context evaluation", "rejected", 5, 5, planned_days=2,
         comment=OVER_LIMIT),
    Past("alice", "bob", "nlp-speech", "h100-80gb", 4, "Speech model pretraining, stage 2", "rejected", 4.5, 4.5,
         planned_days=2, comment=OVER_LIMIT),
]


def _past_steps(past: Past, now: datetime.datetime, standard: PriorityClass) -> list[Step]:
    """Requested ``started_days_ago``; decided two hours later; released ``ended_days_ago`` (a
    rejection or a withdrawal ends the story when it is made)."""
    began = now - past.started_days_ago * DAY
    decided = began + DECISION_DELAY
    ended = max(now - past.ended_days_ago * DAY, decided)
    requester = User.objects.get(username=past.requester)
    decider = User.objects.get(username=past.decider)
    made: list[int] = []

    def request() -> None:
        allocation = allocation_request(
            actor=requester, project=Project.objects.get(slug=past.project), flavor=Flavor.objects.get(name=past.flavor),
            quantity=past.quantity, priority_class=standard, starts_at=None, ends_at=began + past.planned_days * DAY,
            justification=past.justification,
        )  # fmt: skip
        made.append(allocation.pk)
        allocation_rows_date(allocation.pk, began, created=True)

    def decide() -> None:
        if past.outcome == "released":
            allocation_approve(actor=decider, allocation_id=made[0], comment="Approved")
        elif past.outcome == "rejected":
            allocation_reject(actor=decider, allocation_id=made[0], comment=past.comment)
        else:
            allocation_release(actor=requester, allocation_id=made[0])  # a pending request is withdrawn
        allocation_rows_date(made[0], decided)

    def release() -> None:
        allocation_release(actor=requester, allocation_id=made[0], comment=past.comment)
        allocation_rows_date(made[0], ended)

    steps = [Step(began, request), Step(decided, decide)]
    return steps + [Step(ended, release)] if past.outcome == "released" else steps


def demo_history_steps(*, now: datetime.datetime) -> list[Step]:
    """The steps of the past grants' stories (``demo.play.steps_play`` runs them in time order)."""
    standard = PriorityClass.objects.get(name="gpu-standard")
    return [step for past in DEMO_HISTORY + DEMO_TURNED_AWAY for step in _past_steps(past, now, standard)]
