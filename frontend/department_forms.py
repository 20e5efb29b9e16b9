"""The department page's forms (``frontend.views.departments``): input parsing only; the rules
live in ``tenants.self_service``, ``tenants.services`` and ``allocations.admission.project_caps``."""

from __future__ import annotations

from decimal import Decimal

from django import forms

from kernel.limits import TEXT_LIMIT
from tenants.models import Role

USER_HELP = "A username or an e-mail address of someone who has signed in to the portal before."


class MemberAddForm(forms.Form):
    user = forms.CharField(max_length=254, help_text=USER_HELP)
    role = forms.ChoiceField(choices=[(Role.RESEARCHER.value, Role.RESEARCHER.label),
                                      (Role.DEPARTMENT_ADMIN.value, Role.DEPARTMENT_ADMIN.label)])

    def __init__(self, *args: object, platform_admin: bool = False, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        if platform_admin:
            role = self.fields["role"]
            assert isinstance(role, forms.ChoiceField)
            role.choices = list(Role.choices)


class ProjectMemberAddForm(forms.Form):
    user = forms.CharField(max_length=254, help_text=USER_HELP)


class ProjectCreateForm(forms.Form):
    slug = forms.CharField(max_length=63, help_text="Its namespace on every cluster: lowercase letters, digits and '-'; "
                           "it never changes.")
    name = forms.CharField(max_length=200)
    description = forms.CharField(max_length=TEXT_LIMIT, required=False, widget=forms.Textarea(attrs={"rows": 2}))


class ProjectEditForm(forms.Form):
    name = forms.CharField(max_length=200)
    description = forms.CharField(max_length=TEXT_LIMIT, required=False, widget=forms.Textarea(attrs={"rows": 2}))


class CapForm(forms.Form):
    """One cap: a flavor's id (empty: GPU-equivalents) and its limit (empty: remove the cap)."""

    flavor = forms.IntegerField(required=False, min_value=1)
    limit = forms.DecimalField(required=False, min_value=Decimal(0), max_digits=10, decimal_places=4)
