"""The table that maps a group of an identity provider to a role in a department
(``ExternalGroupMapping``): platform admins read and edit it, here, in the API and in the Django
admin, each change audited. A sign-in (OIDC, LDAP) reads it through ``tenants.identity``; a change
applies to each user at their next sign-in (docs/identity.md)."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.http import Http404

from audit import actions
from audit.services import audit_record
from kernel.errors import Conflict
from tenants.access import require_platform_admin
from tenants.models import Department, ExternalGroupMapping


def group_mapping_list(*, user: AbstractBaseUser | AnonymousUser, source: str | None = None) -> QuerySet[ExternalGroupMapping]:
    require_platform_admin(user, to="read the group mappings")
    rows = ExternalGroupMapping.objects.select_related("department")
    return rows.filter(source=source) if source else rows


def group_mapping_get(*, user: AbstractBaseUser | AnonymousUser, mapping_id: int) -> ExternalGroupMapping:
    try:
        return group_mapping_list(user=user).get(pk=mapping_id)
    except ExternalGroupMapping.DoesNotExist:
        raise Http404("No such group mapping.") from None


def _audit_view(mapping: ExternalGroupMapping) -> dict[str, str]:
    return {"source": mapping.source, "external_group": mapping.external_group,
            "department": mapping.department.slug, "role": mapping.role}


@transaction.atomic
def group_mapping_create(
    *, actor: AbstractBaseUser, source: str, external_group: str, department: Department, role: str
) -> ExternalGroupMapping:
    require_platform_admin(actor, to="map groups to roles")
    try:
        with transaction.atomic():
            mapping = ExternalGroupMapping.objects.create(
                source=source, external_group=external_group, department=department, role=role
            )
    except IntegrityError:
        raise Conflict("This group already grants this role in this department.") from None
    audit_record(actor=actor, action=actions.GROUP_MAPPING_CREATED, target=mapping, department_id=department.pk,
                 after=_audit_view(mapping))
    return mapping


@transaction.atomic
def group_mapping_delete(*, actor: AbstractBaseUser, mapping_id: int) -> None:
    """Remove a mapping. The roles it granted stay until each holder's next sign-in recomputes them."""
    mapping = group_mapping_get(user=actor, mapping_id=mapping_id)
    audit_record(actor=actor, action=actions.GROUP_MAPPING_DELETED, target=mapping,
                 department_id=mapping.department_id, before=_audit_view(mapping))
    mapping.delete()
