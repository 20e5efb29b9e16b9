"""Who reads idle policies and idle cases.

Policies are rules everyone with a role may read (so a researcher can see what counts as idle);
cases follow their grant: whoever reads the grant's department reads its cases (researchers,
admins and auditors of its subtree, platform admins). Without a role, or outside one's
departments, a case does not exist (404).
"""

from __future__ import annotations

from collections.abc import Iterable

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import QuerySet
from django.http import Http404

from accounting.idle_models import IdleCase, IdlePolicy
from tenants.access import access_for

User = AbstractBaseUser | AnonymousUser


def idle_policy_list(*, user: User) -> QuerySet[IdlePolicy]:
    if not access_for(user).has_any_role:
        raise Http404("No idle policies to show.")
    return IdlePolicy.objects.select_related("department", "cluster", "priority_class").order_by("name", "id")


def idle_policy_get(*, user: User, policy_id: int) -> IdlePolicy:
    policy = idle_policy_list(user=user).filter(pk=policy_id).first()
    if policy is None:
        raise Http404("No such idle policy.")
    return policy


def idle_case_list(
    *, user: User, states: Iterable[str] | None = None, department_id: int | None = None,
    allocation_id: int | None = None,
) -> QuerySet[IdleCase]:  # fmt: skip
    access = access_for(user)
    if not access.has_any_role:
        raise Http404("No idle cases to show.")
    rows = IdleCase.objects.select_related(
        "policy", "decided_by", "allocation__project__department", "allocation__flavor", "allocation__requested_by",
        "allocation__cluster",
    )  # fmt: skip
    if not access.reads_everything:
        rows = rows.filter(allocation__project__department_id__in=access.readable)
    if department_id is not None:
        if not access.can_read_department(department_id):
            raise Http404("No such department.")
        rows = rows.filter(allocation__project__department_id__in=sorted(access.tree.subtree(department_id)))
    if allocation_id is not None:
        rows = rows.filter(allocation_id=allocation_id)
    if states:
        rows = rows.filter(state__in=list(states))
    return rows.order_by("-opened_at", "-id")


def idle_case_get(*, user: User, case_id: int) -> IdleCase:
    case = idle_case_list(user=user).filter(pk=case_id).first()
    if case is None:
        raise Http404("No such idle case.")
    return case
