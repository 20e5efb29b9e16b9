"""The first platform admin of a new installation (``manage.py create_platform_admin``).

Nobody can grant the first platform admin role through the portal (only a platform admin may), so
an operator with shell access to the installation makes it: the organisation's root department
when it does not exist yet, the user, and the user's platform admin role there, in one transaction,
each audited (``department.created``, ``membership.granted``, with no actor and ``via`` naming the
command). The user is also staff and superuser, so that the Django admin at ``/admin/`` opens.
"""

from __future__ import annotations

from django.contrib.auth.models import User
from django.contrib.auth.password_validation import validate_password
from django.db import transaction

from audit import actions
from audit.services import audit_record
from kernel.errors import FieldError
from tenants.access import access_forget
from tenants.models import Department, Membership, Role

VIA = "manage.py create_platform_admin"


@transaction.atomic
def platform_admin_bootstrap(
    *, username: str, email: str, password: str, organisation_slug: str, organisation_name: str
) -> tuple[User, bool]:
    """The platform admin ``username`` (created with ``password`` when new), and whether anything changed."""
    if not username.strip():
        raise FieldError("username", "The username is empty.")
    changed = False
    organisation = Department.objects.filter(slug=organisation_slug).first()
    if organisation is None:
        organisation = Department(slug=organisation_slug, name=organisation_name or organisation_slug)
        organisation.full_clean()
        organisation.save()
        audit_record(actor=None, action=actions.DEPARTMENT_CREATED, target=organisation, department_id=organisation.pk,
                     after={"slug": organisation.slug, "name": organisation.name, "parent": None}, details={"via": VIA})
        changed = True
    elif organisation.parent_id is not None:
        raise FieldError("organisation", f"{organisation_slug!r} is not a root department: name the organisation.")
    user = User.objects.filter(username=username).first()
    if user is None:
        user = User(username=username, email=email, is_staff=True, is_superuser=True)
        validate_password(password, user)
        user.set_password(password)
        user.full_clean()
        user.save()
        changed = True
    membership, created = Membership.objects.get_or_create(user=user, department=organisation, role=Role.PLATFORM_ADMIN)
    if created:
        audit_record(actor=None, action=actions.MEMBERSHIP_GRANTED, target=membership, department_id=organisation.pk,
                     after={"user": user.get_username(), "role": Role.PLATFORM_ADMIN}, details={"via": VIA})
        access_forget(user)
        changed = True
    return user, changed
