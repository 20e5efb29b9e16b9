"""The allocation page's "Why is it waiting?" panel: the answer of
``allocations.admission.why.allocation_why`` (docs/pending.md), with its times as datetimes for the
template filters."""

from __future__ import annotations

import datetime
from typing import Any

from django.contrib.auth.models import User

from allocations.admission.reasons import WAITING_STATES
from allocations.admission.why import allocation_why
from allocations.models import Allocation


def _moment(value: Any) -> datetime.datetime | None:
    return datetime.datetime.fromisoformat(value) if isinstance(value, str) else None


def why_panel(*, user: User, allocation: Allocation) -> dict[str, Any] | None:
    """The answer for a request that has not started (None for any other)."""
    if allocation.state not in WAITING_STATES:
        return None
    answer = allocation_why(allocation=allocation, viewer=user)
    body = answer.as_dict()
    for offer in body["alternatives"]:
        offer["starts_at"] = _moment(offer["starts_at"])
    if body["holders"]:
        for grant in body["holders"]["named"]:
            grant["ends_at"] = _moment(grant["ends_at"])
    body["estimate_at"] = answer.estimate.starts_at if answer.estimate is not None else None
    return body
