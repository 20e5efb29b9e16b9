"""Demo grants for ``manage.py seed_demo``: enough use to show the quota promises on a fresh
``make run`` (docs/quotas.md). Written once, through the services (four-eyes: a researcher
requests, the department's admin decides), only while the database holds no allocation at all.

``vision`` borrows: it holds 9.5 GPU-equivalents against a guarantee of 8, the newest grant (three
MIG 3g.40gb slices, 1.5) beyond it. ``nlp`` holds 3 whole A100s and a quarter of an H100 (an MPS
share for a notebook, which has sat idle for the last hours: ``demo.idle`` warns it), and alice's
pending request for 4 more A100s stays within ``nlp``'s guarantee of 8 but not within the
organisation's limit of 16: approving it reclaims vision's borrowed slices, with 15 minutes' notice
(bob sees that on the approvals page and in ``GET /api/v1/allocations/{id}/placement-preview/``
before he approves).
"""

from __future__ import annotations

import datetime

from django.contrib.auth.models import User
from django.utils import timezone

from allocations.models import Allocation, Flavor, PriorityClass
from allocations.services import allocation_approve, allocation_request
from tenants.models import Project

# requester, decider (None: left pending), project, flavor, quantity, justification
DEMO_GRANTS: list[tuple[str, str | None, str, str, int, str]] = [
    ("dave", "erin", "vision-seg", "h100-80gb", 4, "Segmentation model training"),
    ("dave", "erin", "vision-seg", "h100-80gb", 4, "Hyper-parameter sweep"),
    ("dave", "erin", "vision-seg", "a100-mig-3g-40gb", 3, "Inference experiments (borrowed capacity)"),
    ("alice", "bob", "nlp-llm", "a100-80gb", 3, "Fine-tuning runs"),
    ("alice", "bob", "nlp-llm", "h100-mps-4", 1, "Interactive notebook for data exploration"),
    ("alice", None, "nlp-llm", "a100-80gb", 4, "Evaluation of the new checkpoints (reclaims vision's borrowed slices)"),
]


def demo_grants_seed(*, days: int = 30) -> int:
    """Create the demo grants unless any allocation exists; returns how many were created."""
    if Allocation.objects.exists():
        return 0
    standard = PriorityClass.objects.get(name="gpu-standard")
    ends_at = timezone.now() + datetime.timedelta(days=days)
    created = 0
    for requester, decider, project, flavor, quantity, justification in DEMO_GRANTS:
        allocation = allocation_request(
            actor=User.objects.get(username=requester), project=Project.objects.get(slug=project),
            flavor=Flavor.objects.get(name=flavor), quantity=quantity, priority_class=standard, starts_at=None,
            ends_at=ends_at, justification=justification,
        )
        created += 1
        if decider is not None:
            allocation_approve(actor=User.objects.get(username=decider), allocation_id=allocation.pk,
                               comment="Approved for the demo")
    return created
