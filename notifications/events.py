"""The catalogue of notification events: what each one is called, who gets it, and whether a
person may turn it off (docs/notifications.md has the table).

Approval events (a request waiting for a decision, the decision itself) and security events are
mandatory: a preference may send them in the daily digest instead of at once, never turn them off.
"""

from __future__ import annotations

from dataclasses import dataclass

ANYONE = "anyone"
DEPARTMENT_ADMINS = "department-admins"
PLATFORM_ADMINS = "platform-admins"


@dataclass(frozen=True)
class Event:
    code: str
    label: str
    audience: str  # who gets it, in words (the preferences page and the docs)
    mandatory: bool = False
    role: str = ANYONE  # who can receive it: ANYONE, DEPARTMENT_ADMINS (platform admins too) or PLATFORM_ADMINS


SUBMITTED = Event("allocation.submitted", "A request in your department waits for a decision", "the department's admins",
                  mandatory=True, role=DEPARTMENT_ADMINS)
DECIDED = Event("allocation.decided", "Your request was approved or rejected", "the requester", mandatory=True)
STARTED = Event("allocation.started", "Your scheduled grant reached its start", "the requester")
RECLAIM_NOTICE = Event("allocation.reclaim_notice", "Your grant is reclaimed (with its notice)", "the grant's owner")
EXPIRING = Event("allocation.expiring", "Your grant ends in 7 days, then in 1 day", "the grant's owner")
EXPIRED = Event("allocation.expired", "Your grant (or request) expired", "the grant's owner")
IDLE_WARNING = Event("allocation.idle_warning", "Your grant has been idle for its policy's window", "the grant's owner")
PUSH_FAILED = Event("cluster.push_failed", "A push to a cluster failed for good", "platform admins", role=PLATFORM_ADMINS)
RULE_CHANGE_PROPOSED = Event(
    "rule_change.proposed", "A change of a quota, quota window or priority class waits for your approval",
    "platform admins other than its proposer", mandatory=True, role=PLATFORM_ADMINS,
)
RULE_CHANGE_EMERGENCY = Event(
    "rule_change.emergency", "A change of a quota, quota window or priority class was applied as an emergency",
    "platform admins other than its author", mandatory=True, role=PLATFORM_ADMINS,
)
DIGEST = Event("digest", "The daily digest of your notifications", "each person with digest events", mandatory=True)

EVENTS: dict[str, Event] = {
    event.code: event
    for event in (
        SUBMITTED, DECIDED, STARTED, RECLAIM_NOTICE, EXPIRING, EXPIRED, IDLE_WARNING, PUSH_FAILED, RULE_CHANGE_PROPOSED,
        RULE_CHANGE_EMERGENCY,
    )
}
"""The events a person (and a webhook) can choose among; the digest is a carrier, not a choice."""


def events_for(*, department_admin: bool, platform_admin: bool) -> dict[str, Event]:
    """The events a person in these roles can receive: the preferences page lists no other."""
    def receives(event: Event) -> bool:
        if event.role == PLATFORM_ADMINS:
            return platform_admin
        if event.role == DEPARTMENT_ADMINS:
            return department_admin or platform_admin
        return True

    return {code: event for code, event in EVENTS.items() if receives(event)}


def event_get(code: str) -> Event:
    if code == DIGEST.code:
        return DIGEST
    try:
        return EVENTS[code]
    except KeyError:
        raise ValueError(f"unknown notification event {code!r}; add it to notifications.events") from None
