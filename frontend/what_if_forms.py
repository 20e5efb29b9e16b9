"""The what-if form: the department it is for, the workload (the last N days, or a file), and the
changes as fields (a quota's limit and guarantee, a priority class's factor and notice) or as the
API's JSON for anything else. The quota-window form's "what would this have done last month"
button sends its own fields here (``window_*``, read by ``initial_from_window``)."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from django import forms
from django.db.models import QuerySet

from allocations.models import PriorityClass, Quota
from tenants.models import Department
from whatifs.models import HISTORY_DAYS_MAX

LAST_MONTH_DAYS = 30


class QuotaChoice(forms.ModelChoiceField):  # type: ignore[type-arg]
    def label_from_instance(self, obj: Quota) -> str:
        return f"{obj.department.slug}: {obj.flavor.name if obj.flavor else 'GPU-equivalents'} (guarantee {obj.guaranteed:g}, limit {obj.limit:g})"


class WhatIfForm(forms.Form):
    department = forms.ModelChoiceField(queryset=Department.objects.none(), required=False,
                                        empty_label="The platform's (platform admins)", label="For department")
    title = forms.CharField(max_length=200, required=False, label="Title")
    history_days = forms.IntegerField(min_value=1, max_value=HISTORY_DAYS_MAX, required=False, initial=7,
                                      label="Replay the last days", help_text="The portal's own requests of these days.")
    workload = forms.FileField(required=False, label="Or a workload file",
                               help_text="JSON Lines or CSV in the twin's format (docs/twin.md); replaces the history.")
    quota = QuotaChoice(queryset=Quota.objects.none(), required=False, label="Quota to change")
    limit_delta = forms.DecimalField(required=False, max_digits=10, decimal_places=4, label="Limit: change by",
                                     help_text="E.g. 4 or -2.")
    guarantee_delta = forms.DecimalField(required=False, max_digits=10, decimal_places=4, label="Guarantee: change by")
    priority_class = forms.ModelChoiceField(queryset=PriorityClass.objects.none(), required=False,
                                            label="Priority class to change (platform admins)")
    oversubscription_factor = forms.DecimalField(required=False, max_digits=6, decimal_places=2, min_value=Decimal(1),
                                                 label="Oversubscription factor")
    notice_minutes = forms.IntegerField(required=False, min_value=0, max_value=10080, label="Reclaim notice (minutes)")
    changes_json = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 4}), label="Advanced: changes as JSON",
                                   help_text='Replaces the fields above, e.g. [{"kind": "quota", "department": "nlp", "limit_delta": 4}].')

    def __init__(self, *args: Any, departments: QuerySet[Department], quotas: QuerySet[Quota], platform: bool,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["department"].queryset = departments  # type: ignore[attr-defined]
        self.fields["department"].required = not platform
        if not platform:
            self.fields["department"].empty_label = None  # type: ignore[attr-defined]  # theirs, the first preselected
        self.fields["quota"].queryset = quotas  # type: ignore[attr-defined]
        if platform:
            self.fields["priority_class"].queryset = PriorityClass.objects.order_by("-value")  # type: ignore[attr-defined]
        else:
            for name in ("priority_class", "oversubscription_factor", "notice_minutes"):
                del self.fields[name]

    def changes(self) -> Any:
        """The API's list of changes the form asks for (the JSON, where given)."""
        data = self.cleaned_data
        if data.get("changes_json"):
            try:
                return json.loads(data["changes_json"])
            except json.JSONDecodeError as error:
                self.add_error("changes_json", f"not JSON: {error.msg}")
                return None
        changes: list[dict[str, Any]] = []
        quota = data.get("quota")
        if quota is not None:
            change: dict[str, Any] = {"kind": "quota", "quota": quota.pk}
            for name in ("limit_delta", "guarantee_delta"):
                if data.get(name) is not None:
                    change[name] = str(data[name])
            changes.append(change)
        pc = data.get("priority_class")
        if pc is not None:
            change = {"kind": "priority_class", "name": pc.name}
            if data.get("oversubscription_factor") is not None:
                change["oversubscription_factor"] = str(data["oversubscription_factor"])
            if data.get("notice_minutes") is not None:
                change["notice_minutes"] = data["notice_minutes"]
            changes.append(change)
        return changes


def initial_from_window(params: Any) -> dict[str, Any]:
    """The what-if a quota window's form asks for: its quota's change over the last month, as if
    in force all month (the replay has no windows yet: an upper bound of the window's effect)."""
    initial: dict[str, Any] = {}
    quota = params.get("window_quota") or params.get("quota")
    if quota and str(quota).isdigit():
        initial.update(quota=int(quota), history_days=LAST_MONTH_DAYS)
        for source, target in (("window_limit_delta", "limit_delta"), ("window_guaranteed_delta", "guarantee_delta")):
            value = params.get(source)
            if value:
                initial[target] = value
        initial["title"] = "What a quota window would have done last month"
    return initial
