"""Platform-admin writes to the catalogue: flavors, priority classes and department quotas."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.forms.models import model_to_dict

from allocations.models import Flavor, PriorityClass, Quota
from audit import actions
from audit.services import audit_record
from kernel.errors import FieldError
from tenants.access import require_platform_admin
from tenants.models import Department


def _plain(data: dict[str, Any]) -> dict[str, Any]:
    return {key: (str(value) if isinstance(value, Decimal) else value) for key, value in data.items()}


@transaction.atomic
def flavor_create(*, actor: User, **fields: Any) -> Flavor:
    require_platform_admin(actor, to="change the catalogue")
    flavor = Flavor(**fields)
    flavor.full_clean()
    flavor.save()
    audit_record(actor=actor, action=actions.FLAVOR_CREATED, target=flavor, after=_plain(model_to_dict(flavor)))
    return flavor


@transaction.atomic
def flavor_update(*, actor: User, flavor_id: int, **fields: Any) -> Flavor:
    require_platform_admin(actor, to="change the catalogue")
    flavor = Flavor.objects.select_for_update().get(pk=flavor_id)
    before = _plain(model_to_dict(flavor))
    for name, value in fields.items():
        setattr(flavor, name, value)
    flavor.full_clean()
    flavor.save()
    after = _plain(model_to_dict(flavor))
    changed = [key for key in after if after[key] != before.get(key)]
    audit_record(
        actor=actor,
        action=actions.FLAVOR_UPDATED,
        target=flavor,
        before={key: before[key] for key in changed},
        after={key: after[key] for key in changed},
    )
    return flavor


@transaction.atomic
def priority_class_create(*, actor: User, **fields: Any) -> PriorityClass:
    require_platform_admin(actor, to="change the catalogue")
    priority_class = PriorityClass(**fields)
    priority_class.full_clean()
    priority_class.save()
    audit_record(
        actor=actor,
        action=actions.PRIORITY_CLASS_CREATED,
        target=priority_class,
        after=_plain(model_to_dict(priority_class)),
    )
    return priority_class


@transaction.atomic
def quota_set(
    *,
    actor: User,
    department: Department,
    flavor: Flavor | None,
    guaranteed: Decimal,
    limit: Decimal,
) -> Quota:
    """Create or change the quota of ``department`` for ``flavor`` (None: GPU-equivalents)."""
    require_platform_admin(actor, to="change the catalogue")
    if guaranteed > limit:
        raise FieldError("guaranteed", "The guaranteed amount may not exceed the limit.")
    if flavor is not None:
        for name, value in (("guaranteed", guaranteed), ("limit", limit)):
            if value != value.to_integral_value():
                raise FieldError(name, "A flavor quota counts whole units.")
    Department.objects.select_for_update().filter(pk=department.pk).get()
    quota = Quota.objects.filter(department=department, flavor=flavor).first()
    before = {"guaranteed": str(quota.guaranteed), "limit": str(quota.limit)} if quota else {}
    if quota is None:
        quota = Quota(department=department, flavor=flavor, guaranteed=guaranteed, limit=limit)
    else:
        quota.guaranteed, quota.limit = guaranteed, limit
    quota.full_clean()
    quota.save()
    audit_record(
        actor=actor,
        action=actions.QUOTA_SET,
        target=quota,
        department_id=department.pk,
        before=before,
        after={
            "flavor": flavor.name if flavor else None,
            "guaranteed": str(guaranteed),
            "limit": str(limit),
        },
    )
    return quota


@transaction.atomic
def quota_delete(*, actor: User, quota_id: int) -> None:
    require_platform_admin(actor, to="change the catalogue")
    # of=("self",): PostgreSQL refuses FOR UPDATE on the nullable side of the outer join to the flavor.
    quota = Quota.objects.select_for_update(of=("self",)).select_related("flavor").get(pk=quota_id)
    audit_record(
        actor=actor,
        action=actions.QUOTA_DELETED,
        target=quota,
        department_id=quota.department_id,
        before={"flavor": quota.flavor.name if quota.flavor else None, "guaranteed": str(quota.guaranteed), "limit": str(quota.limit)},
    )
    quota.delete()
