"""The what-ifs a user may read: platform admins all; a department's admins those of the
departments they administer (subtrees included); anyone their own. Others get 404."""

from __future__ import annotations

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.db.models import Q, QuerySet
from django.http import Http404

from tenants.access import access_for
from whatifs.models import WhatIf


def what_if_list(*, user: AbstractBaseUser | AnonymousUser) -> QuerySet[WhatIf]:
    access = access_for(user)
    if not access.has_any_role:
        raise Http404("No what-ifs are visible to you.")
    rows = WhatIf.objects.select_related("requested_by", "department")
    if access.is_platform_admin:
        return rows.all()
    return rows.filter(Q(department_id__in=access.administered) | Q(requested_by_id=user.pk))


def what_if_get(*, user: AbstractBaseUser | AnonymousUser, what_if_id: int) -> WhatIf:
    found = what_if_list(user=user).filter(pk=what_if_id).first()
    if found is None:
        raise Http404("No such what-if.")
    return found
