"""Who reads statements and rate cards.

Statements are for the department's admins (their subtree), auditors (theirs) and platform admins;
a researcher who reads the department gets 403 for one, an outsider 404, and a list holds only
what its reader may see. Rate cards are prices everyone with a role may read.
"""

from __future__ import annotations

import datetime

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Prefetch, QuerySet
from django.http import Http404

from accounting.models import RateCard, Statement, StatementLine
from kernel.errors import NotAllowed
from tenants.access import Access, access_for

User = AbstractBaseUser | AnonymousUser


def _statements_visible(access: Access) -> frozenset[int] | None:
    """The departments whose statements ``access`` reads; None: all of them."""
    if access.is_platform_admin:
        return None
    return access.administered | access.audited


def statement_list(
    *, user: User, department_id: int | None = None, period_start: datetime.datetime | None = None
) -> QuerySet[Statement]:
    access = access_for(user)
    if not access.has_any_role:
        raise Http404("No statements to show.")
    rows = Statement.objects.select_related("department")
    visible = _statements_visible(access)
    if visible is not None:
        rows = rows.filter(department_id__in=visible)
    if department_id is not None:
        if not access.can_read_department(department_id):
            raise Http404("No such department.")
        rows = rows.filter(department_id=department_id)
    if period_start is not None:
        rows = rows.filter(period_start=period_start)
    return rows.order_by("-period_start", "department__slug", "currency")


def statement_get(*, user: User, statement_id: int) -> Statement:
    access = access_for(user)
    lines = Prefetch("lines", queryset=StatementLine.objects.select_related("project", "flavor", "rate_card").order_by("number"))
    statement = Statement.objects.select_related("department").prefetch_related(lines).filter(pk=statement_id).first()
    if statement is None or not access.can_read_department(statement.department_id):
        raise Http404("No such statement.")
    visible = _statements_visible(access)
    if visible is not None and statement.department_id not in visible:
        raise NotAllowed("Statements are for the department's admins and auditors.")
    return statement


def department_charges_allowed(*, user: User, department_id: int) -> None:
    """A draft of a department's charges: for those who may read its statements."""
    access = access_for(user)
    if not access.can_read_department(department_id):
        raise Http404("No such department.")
    visible = _statements_visible(access)
    if visible is not None and department_id not in visible:
        raise NotAllowed("Statements are for the department's admins and auditors.")


def rate_card_list(*, user: User) -> QuerySet[RateCard]:
    if not access_for(user).has_any_role:
        raise Http404("No rate cards to show.")
    return RateCard.objects.select_related("flavor").order_by("flavor__name", "valid_from")


def rate_card_get(*, user: User, rate_card_id: int) -> RateCard:
    card = rate_card_list(user=user).filter(pk=rate_card_id).first()
    if card is None:
        raise Http404("No such rate card.")
    return card
