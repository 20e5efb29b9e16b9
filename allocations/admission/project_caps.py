"""Project caps (docs/quotas.md, "Project caps"): what department admins set, and the check that
admission, renewals and raises make before the department's quotas.

A cap is a ceiling on what one project's grants may hold over the request's interval (every
holding grant of the project that overlaps it counts, as for department quotas), in units of one
flavor or in GPU-equivalents. Caps guarantee nothing and may add up to more than the department's
limit: they stop one project from taking all of its department's quota, and the department's
own quotas still apply on top. A capped request is refused (409 ``quota_exceeded`` naming the
project cap); a cap never reclaims anything, not even the project's own grants.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import DecimalField, ExpressionWrapper, F, Q, Sum

from allocations.catalogue.states import HOLDING_STATES
from allocations.models import Allocation, Flavor, ProjectQuota
from allocations.quotas.wording import project_cap_exceeded_words, scope_words
from audit import actions
from audit.services import audit_record
from kernel.errors import FieldError, NotAllowed, QuotaExceeded
from kernel.numbers import plain
from tenants.access import access_for
from tenants.models import Project

EQUIVALENTS = ExpressionWrapper(F("quantity") * F("flavor__gpu_equivalents"), output_field=DecimalField())


def _holding(*, project_id: int, starts_at: datetime.datetime, ends_at: datetime.datetime, exclude: int | None) -> Any:
    rows = Allocation.objects.filter(
        project_id=project_id, state__in=HOLDING_STATES, starts_at__lt=ends_at, ends_at__gt=starts_at
    )
    return rows.exclude(pk=exclude) if exclude is not None else rows


def project_cap_refusal(
    *, allocation: Allocation, quantity: int, starts_at: datetime.datetime, ends_at: datetime.datetime
) -> QuotaExceeded | None:
    """Why ``quantity`` units of the allocation's flavor would take its project beyond a cap over
    ``[starts_at, ends_at)``, or None. The allocation's own holding is left out. One query when
    the project has no cap for the flavor or for GPU-equivalents (most projects), two otherwise."""
    flavor = allocation.flavor
    caps = list(ProjectQuota.objects.filter(Q(flavor=flavor) | Q(flavor__isnull=True), project_id=allocation.project_id))
    if not caps:
        return None
    held = _holding(project_id=allocation.project_id, starts_at=starts_at, ends_at=ends_at, exclude=allocation.pk).aggregate(
        units=Sum("quantity", filter=Q(flavor=flavor)), equivalents=Sum(EQUIVALENTS)
    )
    for cap in sorted(caps, key=lambda row: row.flavor_id is None):  # the flavor's own cap first
        if cap.flavor_id is not None:
            holds, requested = Decimal(held["units"] or 0), Decimal(quantity)
        else:
            holds = Decimal(held["equivalents"] or 0).quantize(Decimal("0.0001"))
            requested = (flavor.gpu_equivalents * quantity).quantize(Decimal("0.0001"))
        if holds + requested <= cap.limit:
            continue
        slug = allocation.project.slug
        what = scope_words(cap.flavor_id, flavor=flavor.name, priority_class="")  # a flavor's units or GPU-equivalents
        return QuotaExceeded(
            project_cap_exceeded_words(what=what, project=slug, span=(starts_at, ends_at),
                                       requested=requested, holds=holds, cap=cap.limit),
            details={
                "project": slug, "cap": "project", "flavor": flavor.name if cap.flavor_id is not None else None,
                "requested": plain(requested), "in_use": plain(holds), "limit": plain(cap.limit),
                "from": starts_at.isoformat(), "until": ends_at.isoformat(),
            },
        )
    return None


@dataclass(frozen=True)
class CapUse:
    """A cap and what the project's grants hold under it now."""

    flavor_id: int | None
    flavor: str | None
    limit: Decimal
    in_use: Decimal


def project_caps(*, project: Project, at: datetime.datetime) -> list[CapUse]:
    """The project's caps and what its grants hold under each at ``at``."""
    return department_caps(project_ids=[project.pk], at=at).get(project.pk, [])


def _caps_map(project: Project) -> dict[str, str]:
    return {
        (row.flavor.name if row.flavor is not None else "gpu-equivalents"): plain(row.limit)
        for row in ProjectQuota.objects.filter(project=project).select_related("flavor")
    }


@transaction.atomic
def project_caps_set(*, actor: User, project: Project, caps: list[tuple[Flavor | None, Decimal]]) -> list[ProjectQuota]:
    """Replace the project's caps with ``caps`` (flavor or None for GPU-equivalents, limit); an
    empty list removes them all. Department admins of the project's department. Audited with the
    caps before and after (nothing recorded when nothing changes). Grants already held above a
    new cap keep running: the cap refuses only what is admitted from now on."""
    if not access_for(actor).can_administer_department(project.department_id):
        raise NotAllowed("Only an admin of the project's department may set its caps.")
    seen: set[int | None] = set()
    for index, (flavor, limit) in enumerate(caps):
        key = flavor.pk if flavor is not None else None
        if key in seen:
            raise FieldError(f"caps.{index}.flavor", "Each flavor (and GPU-equivalents) may have one cap only.")
        seen.add(key)
        if limit < 0:
            raise FieldError(f"caps.{index}.limit", "Must be 0 or more.")
    project = Project.objects.select_for_update(no_key=True).get(pk=project.pk)
    before = _caps_map(project)
    for row in ProjectQuota.objects.filter(project=project):
        if row.flavor_id not in seen:
            row.delete()
    for flavor, limit in caps:
        ProjectQuota.objects.update_or_create(project=project, flavor=flavor, defaults={"limit": limit})
    after = _caps_map(project)
    if after != before:
        audit_record(actor=actor, action=actions.PROJECT_QUOTA_SET, target=project,
                     department_id=project.department_id, before={"caps": before}, after={"caps": after})
    return list(ProjectQuota.objects.filter(project=project).select_related("flavor").order_by("flavor__name"))


def department_caps(*, project_ids: list[int], at: datetime.datetime) -> dict[int, list[CapUse]]:
    """Each project's caps and what its grants hold under each at ``at``, for many projects at
    once (three queries, whatever their number): the department page."""
    caps = list(ProjectQuota.objects.filter(project_id__in=project_ids).select_related("flavor")
                .order_by("project_id", "flavor__name"))
    if not caps:
        return {}
    rows = Allocation.objects.filter(
        project_id__in=sorted({cap.project_id for cap in caps}), state__in=HOLDING_STATES, starts_at__lte=at,
        ends_at__gt=at,
    )
    units = {(project, flavor): total for project, flavor, total in
             rows.values("project_id", "flavor_id").annotate(total=Sum("quantity"))
             .values_list("project_id", "flavor_id", "total")}
    equivalents = dict(rows.values("project_id").annotate(total=Sum(EQUIVALENTS)).values_list("project_id", "total"))
    out: dict[int, list[CapUse]] = {}
    for cap in caps:
        in_use = (Decimal(units.get((cap.project_id, cap.flavor_id), 0)) if cap.flavor_id is not None
                  else Decimal(equivalents.get(cap.project_id) or 0).quantize(Decimal("0.0001")))
        out.setdefault(cap.project_id, []).append(CapUse(
            flavor_id=cap.flavor_id, flavor=cap.flavor.name if cap.flavor is not None else None, limit=cap.limit,
            in_use=in_use,
        ))
    return out
