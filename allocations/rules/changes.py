"""Four-eyes on the rules: changes of quotas and priority classes, by anyone, platform admins
included (docs/quotas.md, "Four-eyes on the rules").

One rule decides whether a change of the rules needs a second person,
:func:`rule_change_needs_second`; quota windows follow it too (``allocations.windows.services``).
With ``GPUPORTAL_FOUR_EYES`` on, a change proposed through :func:`rule_change_propose` is checked
as it would be applied (400 naming the field now, not at approval), recorded as a pending
:class:`~allocations.models.rule_changes.RuleChange` and told to the other platform admins; another
platform admin approves it (then it is applied, with the rules of :mod:`allocations.rules.catalogue` checked
again against what holds then) or rejects it with a comment; its proposer may withdraw it and never
decides it. An emergency applies at once when it states its reason (1 to ``REASON_LIMIT``
characters, 400 naming ``reason`` otherwise), audited as ``rule_change.emergency`` with the reason
and told to the other platform admins. With four-eyes off, every change applies at once as before.

The catalogue's own writes (``allocations.rules.catalogue``: ``quota_set``, ``quota_update``,
``priority_class_create``...) apply a change and hold its rules; the API, the portal and the Django
admin reach them only through here (``tests/architecture/test_rule_changes.py``).

Locks: a decision locks the change's row first (only the transactions deciding it take it), then the
catalogue takes its own in the global order (``kernel.locks``: the department chain, the quota);
each audit event is recorded in the same transaction, last; pushes and notifications leave after
the commit.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User
from django.db import models, transaction
from django.db.models import Q, QuerySet
from django.forms.models import model_to_dict
from django.http import Http404

from allocations.models import Flavor, PriorityClass, Quota
from allocations.models.rule_changes import REASON_LIMIT, RuleChange, RuleChangeKind, RuleChangeState
from allocations.rules import catalogue as catalog
from audit import actions
from audit.services import audit_record
from kernel import numbers
from kernel.clock import clock_now
from kernel.errors import FieldError, FourEyes, NotAllowed, TransitionNotAllowed
from kernel.limits import TEXT_LIMIT
from kernel.transactions import retry_on_deadlock
from notifications import events
from notifications.outbox import notification_enqueue
from notifications.recipients import platform_admins
from tenants.access import access_for, department_chain, require_platform_admin
from tenants.models import Department

DECIDE = "decide on changes of the rules"
QUOTA_KINDS = (RuleChangeKind.QUOTA_SET, RuleChangeKind.QUOTA_UPDATE, RuleChangeKind.QUOTA_DELETE)


def rule_change_needs_second(*, emergency: bool = False, reason: str = "") -> bool:
    """Whether a change of the rules (a quota, a quota window, a priority class) waits for a second
    admin: with ``GPUPORTAL_FOUR_EYES`` on, unless it is an emergency; an emergency must state its
    reason (``FieldError`` naming ``reason`` otherwise). The one place this is decided."""
    if not settings.GPUPORTAL_FOUR_EYES:
        return False
    if not emergency:
        return True
    if not isinstance(reason, str) or not reason.strip():
        raise FieldError("reason", "An emergency change states its reason; without one it waits for a second admin.")
    if len(reason) > REASON_LIMIT:
        raise FieldError("reason", f"At most {REASON_LIMIT} characters.")
    return False


def rule_emergency_record(
    *, actor: User, target: models.Model, what: str, reason: str, department_id: int | None = None,
    details: dict[str, Any] | None = None,
) -> None:
    """Audit an emergency change of the rules (after the change's own event) and tell the other
    platform admins, in the caller's transaction."""
    notification_enqueue(
        event=events.RULE_CHANGE_EMERGENCY, recipients=[pk for pk in platform_admins() if pk != actor.pk],
        department_id=department_id, subject=f"emergency:{what}",
        payload={"what": what, "by": actor.get_username(), "reason": reason, **(details or {})},
    )
    audit_record(actor=actor, action=actions.RULE_CHANGE_EMERGENCY, target=target, department_id=department_id,
                 details={"what": what, "reason": reason, **(details or {})})


def rule_proposal_notify(*, actor: User, what: str, department_id: int | None, payload: dict[str, Any]) -> None:
    """Tell the platform admins who may approve it (all but the proposer) that a change waits."""
    notification_enqueue(
        event=events.RULE_CHANGE_PROPOSED, recipients=[pk for pk in platform_admins() if pk != actor.pk],
        department_id=department_id, subject=f"proposed:{what}", payload={"what": what, "by": actor.get_username(),
                                                                         **payload},
    )


@dataclass(frozen=True)
class RuleOutcome:
    """What a proposal did: ``change`` waits (``applied`` None), or the change was applied
    (``applied`` the quota or class, None once removed; ``change`` the emergency's record, if any)."""

    change: RuleChange | None
    applied: Quota | PriorityClass | None
    pending: bool


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return numbers.plain(value)
    if isinstance(value, models.Model):
        return value.pk
    return value


def _decimal(value: Any) -> Decimal | None:
    return None if value is None else Decimal(str(value))


def _quota_numbers(fields: dict[str, Any]) -> dict[str, Decimal | None]:
    return {name: _decimal(fields[name]) for name in catalog.QUOTA_NUMBERS if name in fields}


def _flavor(flavor_id: int | None) -> Flavor | None:
    return None if flavor_id is None else Flavor.objects.get(pk=flavor_id)


def _check(kind: str, *, fields: dict[str, Any], quota: Quota | None, priority_class: PriorityClass | None) -> None:
    """Check a proposal as applying it would (FieldError naming the field); the department chain
    stays locked until the proposal commits."""
    if kind == RuleChangeKind.QUOTA_SET:
        numbers = _quota_numbers(fields)
        guaranteed, limit = numbers["guaranteed"], numbers["limit"]
        assert guaranteed is not None and limit is not None
        catalog.quota_check(department_id=fields["department"], flavor=_flavor(fields.get("flavor")), guaranteed=guaranteed,
                            limit=limit, lending_limit=numbers.get("lending_limit"))
    elif kind == RuleChangeKind.QUOTA_UPDATE:
        assert quota is not None
        merged = {name: getattr(quota, name) for name in catalog.QUOTA_NUMBERS} | _quota_numbers(fields)
        catalog.quota_check(department_id=quota.department_id, flavor=quota.flavor, guaranteed=merged["guaranteed"],
                            limit=merged["limit"], lending_limit=merged["lending_limit"])
    elif kind in (RuleChangeKind.PRIORITY_CLASS_CREATE, RuleChangeKind.PRIORITY_CLASS_UPDATE):
        draft = PriorityClass(**fields) if priority_class is None else PriorityClass.objects.get(pk=priority_class.pk)
        if priority_class is not None:
            if fields.get("name", priority_class.name) != priority_class.name:
                raise FieldError("name", f"The name of priority class {priority_class.name} is its Kubernetes object's "
                                 "name and cannot change; create a new class instead.")
            for name, value in fields.items():
                setattr(draft, name, value)
        draft.full_clean()


def _apply(change: RuleChange, *, actor: User, via: str) -> Quota | PriorityClass | None:
    """Apply ``change`` through the catalogue, which checks its rules again and audits it."""
    fields = change.proposed
    if change.kind == RuleChangeKind.QUOTA_SET:
        numbers = _quota_numbers(fields)
        guaranteed, limit = numbers["guaranteed"], numbers["limit"]
        assert guaranteed is not None and limit is not None
        return catalog.quota_set(actor=actor, department=Department.objects.get(pk=fields["department"]),
                                 flavor=_flavor(fields.get("flavor")), guaranteed=guaranteed, limit=limit,
                                 lending_limit=numbers.get("lending_limit"), via=via)
    quota_gone = change.quota_id is None or not Quota.objects.filter(pk=change.quota_id).exists()
    if change.kind in (RuleChangeKind.QUOTA_UPDATE, RuleChangeKind.QUOTA_DELETE) and quota_gone:
        raise TransitionNotAllowed(f"The quota of rule change #{change.pk} is gone; reject the change.")
    if change.kind == RuleChangeKind.QUOTA_UPDATE:
        assert change.quota_id is not None
        return catalog.quota_update(actor=actor, quota_id=change.quota_id, via=via, **_quota_numbers(fields))
    if change.kind == RuleChangeKind.QUOTA_DELETE:
        assert change.quota_id is not None
        catalog.quota_delete(actor=actor, quota_id=change.quota_id, via=via)
        return None
    typed = {name: (_decimal(value) if name == "oversubscription_factor" else value) for name, value in fields.items()}
    if change.kind == RuleChangeKind.PRIORITY_CLASS_CREATE:
        return catalog.priority_class_create(actor=actor, via=via, **typed)
    if change.priority_class_id is None or not PriorityClass.objects.filter(pk=change.priority_class_id).exists():
        raise TransitionNotAllowed(f"The priority class of rule change #{change.pk} is gone; reject the change.")
    if change.kind == RuleChangeKind.PRIORITY_CLASS_UPDATE:
        return catalog.priority_class_update(actor=actor, priority_class_id=change.priority_class_id, via=via, **typed)
    catalog.priority_class_delete(actor=actor, priority_class_id=change.priority_class_id, via=via)
    return None


def _describe(change: RuleChange) -> dict[str, Any]:
    return {"rule_change": change.pk, "kind": change.kind, "quota": change.quota_id,
            "priority_class": change.priority_class_id, "proposed": change.proposed}


@transaction.atomic
def rule_change_propose(
    *, actor: User, kind: str, fields: dict[str, Any] | None = None, quota_id: int | None = None,
    priority_class_id: int | None = None, emergency: bool = False, reason: str = "", via: str = "api",
) -> RuleOutcome:
    """Propose a change of a quota or priority class (platform admins). ``fields`` as the catalogue
    takes them: for ``quota.set`` the department, flavor (ids or objects) and the numbers; for
    ``quota.update`` some numbers; for ``priority_class.create``/``update`` the class's fields.
    Pending (``pending`` True) while four-eyes holds; applied at once otherwise."""
    require_platform_admin(actor, to="change the catalogue")
    if kind not in RuleChangeKind.values:
        raise FieldError("kind", f"One of {', '.join(RuleChangeKind.values)}.")
    if len(reason) > REASON_LIMIT:
        raise FieldError("reason", f"At most {REASON_LIMIT} characters.")
    plain = {name: _plain(value) for name, value in (fields or {}).items()}
    if not rule_change_needs_second(emergency=emergency, reason=reason):
        change = RuleChange(kind=kind, proposed=plain, quota_id=quota_id, priority_class_id=priority_class_id)
        applied = _apply(change, actor=actor, via=via)
        if not (settings.GPUPORTAL_FOUR_EYES and emergency):
            return RuleOutcome(change=None, applied=applied, pending=False)
        return RuleOutcome(change=_emergency(change, actor=actor, applied=applied, reason=reason), applied=applied,
                           pending=False)
    quota = priority_class = None
    department_id = plain.get("department") if kind == RuleChangeKind.QUOTA_SET else None
    if quota_id is not None:
        quota = Quota.objects.select_related("flavor").get(pk=quota_id)
        department_id = quota.department_id
    if priority_class_id is not None:
        priority_class = PriorityClass.objects.get(pk=priority_class_id)
    if department_id is not None:
        department_chain(department_id=department_id, lock=True)
    _check(kind, fields=plain, quota=quota, priority_class=priority_class)
    before: dict[str, Any] = {}
    if quota is not None:
        before = {name: _plain(getattr(quota, name)) for name in catalog.QUOTA_NUMBERS}
    elif priority_class is not None:
        before = {name: _plain(value) for name, value in model_to_dict(priority_class).items() if name != "id"}
    change = RuleChange.objects.create(
        kind=kind, proposed=plain, before=before, quota=quota, priority_class=priority_class, department_id=department_id,
        reason=reason, proposed_by=actor,
    )
    rule_proposal_notify(actor=actor, what=f"rule_change:{change.pk}", department_id=department_id,
                         payload=_describe(change))
    audit_record(actor=actor, action=actions.RULE_CHANGE_PROPOSED, target=change, department_id=department_id,
                 before=before, after=plain, details={"kind": kind, "reason": reason, "via": via})
    return RuleOutcome(change=change, applied=None, pending=True)


def _emergency(change: RuleChange, *, actor: User, applied: Quota | PriorityClass | None, reason: str) -> RuleChange:
    """Record an emergency change that was just applied, its audit event and the notice."""
    if isinstance(applied, Quota):
        change.quota, change.department_id = applied, applied.department_id
    elif isinstance(applied, PriorityClass):
        change.priority_class = applied
    if change.kind == RuleChangeKind.QUOTA_SET:
        change.department_id = change.proposed.get("department")
    change.state, change.emergency, change.reason = RuleChangeState.APPLIED, True, reason
    change.proposed_by = change.decided_by = actor
    change.decided_at = clock_now()
    change.save()
    rule_emergency_record(actor=actor, target=change, what=f"rule_change:{change.pk}", reason=reason,
                          department_id=change.department_id, details=_describe(change))
    return change


def _change_lock(change_id: int) -> RuleChange:
    change = RuleChange.objects.select_for_update(of=("self",)).select_related("proposed_by").filter(pk=change_id).first()
    if change is None:
        raise Http404("No such rule change.")
    return change


def _require_decider(*, actor: User, change: RuleChange) -> None:
    require_platform_admin(actor, to=DECIDE)
    if settings.GPUPORTAL_FOUR_EYES and change.proposed_by_id == actor.pk:
        raise FourEyes("Nobody decides on their own change of the rules: another platform admin must.",
                       details={"proposed_by": change.proposed_by.get_username()})


def _require_pending(change: RuleChange) -> None:
    if change.state != RuleChangeState.PENDING:
        raise TransitionNotAllowed(f"Rule change #{change.pk} is {change.state}; only a pending change can be decided.",
                                   details={"state": change.state})


def _decide(change: RuleChange, *, actor: User, state: str, comment: str) -> None:
    change.state, change.decided_by, change.decided_at, change.decision_comment = state, actor, clock_now(), comment
    change.save(update_fields=["state", "decided_by", "decided_at", "decision_comment"])


def _comment(comment: str) -> str:
    if len(comment) > TEXT_LIMIT:
        raise FieldError("comment", f"At most {TEXT_LIMIT} characters.")
    return comment


@retry_on_deadlock()
def rule_change_approve(*, actor: User, change_id: int, comment: str = "") -> RuleChange:
    """Apply a pending change (another platform admin than its proposer): the catalogue checks its
    rules against what holds now (400 naming the field; the change stays pending)."""
    change = _change_lock(change_id)
    _require_decider(actor=actor, change=change)
    _require_pending(change)
    _decide(change, actor=actor, state=RuleChangeState.APPLIED, comment=_comment(comment))
    _apply(change, actor=actor, via=f"rule_change:{change.pk}")
    audit_record(actor=actor, action=actions.RULE_CHANGE_APPROVED, target=change, department_id=change.department_id,
                 after={"state": change.state},
                 details={**_describe(change), "proposed_by": change.proposed_by.get_username(), "comment": comment})
    return change


@retry_on_deadlock()
def rule_change_reject(*, actor: User, change_id: int, comment: str) -> RuleChange:
    change = _change_lock(change_id)
    _require_decider(actor=actor, change=change)
    _require_pending(change)
    if not comment.strip():
        raise FieldError("comment", "A rejection needs a comment for the proposer.")
    _decide(change, actor=actor, state=RuleChangeState.REJECTED, comment=_comment(comment))
    audit_record(actor=actor, action=actions.RULE_CHANGE_REJECTED, target=change, department_id=change.department_id,
                 before={"state": RuleChangeState.PENDING}, after={"state": change.state},
                 details={**_describe(change), "proposed_by": change.proposed_by.get_username(), "comment": comment})
    return change


@retry_on_deadlock()
def rule_change_withdraw(*, actor: User, change_id: int) -> RuleChange:
    change = _change_lock(change_id)
    if change.proposed_by_id != actor.pk:
        raise NotAllowed("Only its proposer withdraws a change of the rules; others reject it.")
    _require_pending(change)
    _decide(change, actor=actor, state=RuleChangeState.WITHDRAWN, comment="")
    audit_record(actor=actor, action=actions.RULE_CHANGE_WITHDRAWN, target=change, department_id=change.department_id,
                 before={"state": RuleChangeState.PENDING}, after={"state": change.state}, details=_describe(change))
    return change


# -------------------------------------------------------------------------------- selectors


def rule_change_list(
    *, user: AbstractBaseUser | AnonymousUser, state: str | None = None, kind: str | None = None,
    quota_id: int | None = None, priority_class_id: int | None = None,
) -> QuerySet[RuleChange]:
    """The changes ``user`` may read, newest first: all for platform admins and organisation-wide
    readers, a readable department's quota changes for its readers, none for others."""
    access = access_for(user)
    queryset = RuleChange.objects.select_related("proposed_by", "decided_by", "quota", "priority_class", "department")
    if not access.reads_everything:
        queryset = queryset.filter(Q(department_id__in=access.readable) & Q(kind__in=QUOTA_KINDS))
    if state:
        queryset = queryset.filter(state=state)
    if kind:
        queryset = queryset.filter(kind=kind)
    if quota_id is not None:
        queryset = queryset.filter(quota_id=quota_id)
    if priority_class_id is not None:
        queryset = queryset.filter(priority_class_id=priority_class_id)
    return queryset.order_by("-created_at", "-id")


def rule_change_get(*, user: AbstractBaseUser | AnonymousUser, change_id: int) -> RuleChange:
    try:
        return rule_change_list(user=user).get(pk=change_id)
    except RuleChange.DoesNotExist:
        raise Http404("No such rule change.") from None


def rule_changes_pending(*, quota_ids: list[int]) -> dict[int, list[int]]:
    """``{quota id: [ids of its pending changes]}`` (for the quota's own answer)."""
    found: dict[int, list[int]] = {}
    rows = RuleChange.objects.filter(quota_id__in=quota_ids, state=RuleChangeState.PENDING).order_by("pk")
    for change_id, quota_id in rows.values_list("pk", "quota_id"):
        found.setdefault(quota_id, []).append(change_id)
    return found
