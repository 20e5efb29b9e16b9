"""Why a request is still waiting: the one closed list of reason codes (docs/pending.md) and how
a code is read off admission's own verdict.

Every waiting request has exactly one primary reason and may have secondary ones. The codes come
from what ``planning.admission_decide`` returned (its refusal's class and details, the cause the
placement attempt recorded, the victims it would take) or from the request's own state (a
scheduled grant waits for its start or for its victims' notice): never from a second computation
that could disagree with the one admission makes.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from allocations.booking.attempts import CAUSE_DRIVER_MINIMUM, CAUSE_TENANCY, CAUSE_TENANCY_SOME
from kernel.errors import ApplicationError, CapacityExceeded, QuotaExceeded
from kernel.words import counted


class ReasonCode(StrEnum):
    """The closed list; docs/pending.md documents each (``tests/why`` holds them to it)."""

    AWAITING_DECISION = "awaiting-decision"
    FOUR_EYES = "four-eyes"
    QUOTA = "quota"
    OUTSIDE_WINDOW = "outside-window"
    NO_FIT = "no-fit"
    TENANCY = "tenancy"
    DRIVER_MINIMUM = "driver-minimum"
    RECLAIM_NOTICE = "reclaim-notice"
    SCHEDULED_START = "scheduled-start"
    PROVISIONING = "provisioning"
    CLUSTER_UNREACHABLE = "cluster-unreachable"
    UNKNOWN = "unknown"


WAITING_STATES = ("pending", "scheduled", "approved", "provisioning", "failed")
"""The states of a request that has not started yet: the ones ``why`` answers for."""


@dataclass(frozen=True)
class Reason:
    """One reason: its code, a sentence for people, and the facts behind it (numbers, names, times)."""

    code: ReasonCode
    text: str
    facts: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"code": self.code.value, "text": self.text, "facts": self.facts}


@dataclass(frozen=True)
class Verdict:
    """What the reasons are read from: admission's refusal (None: it would be admitted now), the
    number of grants it would reclaim and their longest notice, and the request's own facts."""

    refusal: ApplicationError | None
    reclaims: int = 0
    notice_minutes: int = 0
    starts_at: datetime.datetime | None = None
    now: datetime.datetime | None = None


def _capacity_reason(refusal: CapacityExceeded) -> tuple[Reason, list[Reason]]:
    details = dict(refusal.details)
    cause = str(details.get("cause", ""))
    if cause == CAUSE_DRIVER_MINIMUM:
        return Reason(ReasonCode.DRIVER_MINIMUM, refusal.message, details), []
    if cause == CAUSE_TENANCY:
        return Reason(ReasonCode.TENANCY, refusal.message, details), []
    secondary = []
    if cause == CAUSE_TENANCY_SOME:
        secondary.append(Reason(ReasonCode.TENANCY, "Some nodes are kept apart from this department (a dedicated "
                                "pool or another department's MPS node).", {"cluster": details.get("cluster")}))
    return Reason(ReasonCode.NO_FIT, refusal.message, details), secondary


def refusal_reasons(refusal: ApplicationError) -> tuple[Reason, list[Reason]]:
    """The primary and secondary reasons of admission's refusal."""
    if isinstance(refusal, QuotaExceeded):
        details = dict(refusal.details)
        details["level"] = "project" if "project" in details else "department"
        return Reason(ReasonCode.QUOTA, refusal.message, details), []
    if isinstance(refusal, CapacityExceeded):
        return _capacity_reason(refusal)
    return Reason(ReasonCode.UNKNOWN, refusal.message, {"code": refusal.code, **refusal.details}), []


def pending_reasons(verdict: Verdict, *, deciders: list[str], requester_decides: bool) -> tuple[Reason, list[Reason]]:
    """The reasons of a request still waiting for a decision (state ``pending``): admission's
    refusal when it would refuse it now; else the admins it waits for (four-eyes when the
    requester is one of the department's admins: another must decide)."""
    if verdict.refusal is not None:
        return refusal_reasons(verdict.refusal)
    secondary = []
    if verdict.reclaims:
        secondary.append(Reason(
            ReasonCode.RECLAIM_NOTICE, f"Approval would reclaim {counted(verdict.reclaims, 'grant')}; they keep running for "
            f"their notice ({verdict.notice_minutes} min at most) before it starts.",
            {"grants": verdict.reclaims, "notice_minutes": verdict.notice_minutes},
        ))
    if verdict.starts_at is not None and verdict.now is not None and verdict.starts_at > verdict.now:
        secondary.append(Reason(ReasonCode.SCHEDULED_START, "Once approved it starts at its start.",
                                {"starts_at": verdict.starts_at.isoformat()}))
    who = ", ".join(deciders) or "a platform admin"
    if requester_decides:
        return Reason(ReasonCode.FOUR_EYES, f"It fits now; nobody decides on their own request: another admin ({who}) "
                      "must approve it.", {"deciders": deciders}), secondary
    return Reason(ReasonCode.AWAITING_DECISION, f"It fits now and waits for an admin's decision ({who}).",
                  {"deciders": deciders}), secondary


def scheduled_reason(*, starts_at: datetime.datetime, notice_until: datetime.datetime | None,
                     now: datetime.datetime) -> Reason:
    """A scheduled grant: its victims' notice (until the last deadline), else its start."""
    if notice_until is not None and notice_until > now:
        return Reason(ReasonCode.RECLAIM_NOTICE, "Approved: the grants reclaimed for it keep running until their "
                      "notice ends.", {"until": notice_until.isoformat()})
    return Reason(ReasonCode.SCHEDULED_START, "Approved: it starts at its start.", {"until": starts_at.isoformat()})


def delivery_reason(*, state: str, cluster: str, last_error: str) -> Reason:
    """A grant approved but not running yet: on its way to the cluster, or the cluster refuses or
    cannot be reached (its last push error)."""
    if last_error or state == "failed":
        return Reason(ReasonCode.CLUSTER_UNREACHABLE, f"Approved, but cluster {cluster} has not taken it: "
                      f"{last_error or 'its provisioning failed'}.", {"cluster": cluster, "error": last_error})
    return Reason(ReasonCode.PROVISIONING, f"Approved: it is being put on cluster {cluster}.", {"cluster": cluster})
