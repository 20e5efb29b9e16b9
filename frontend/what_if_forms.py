"""The what-if form: the department it is for, the workload (the last N days, or a file), and the
changes as fields (a quota's limit and guarantee, a priority class's factor and notice) or as the
API's JSON for anything else. The quota-window form's "what would this have done last month"
button sends its own fields here (``window_*``, read by ``initial_from_window``)."""

from __future__ import annotations

import datetime
import json
from decimal import Decimal
from typing import Any

from django import forms
from django.db.models import QuerySet
from django.utils.datastructures import MultiValueDict

from allocations.models import PriorityClass, Quota
from allocations.models.windows import ShrinkPolicy
from frontend.window_forms import WindowTermsFields
from kernel.clock import clock_now
from tenants.models import Department
from whatifs.models import HISTORY_DAYS_MAX

LAST_MONTH_DAYS = 30
WEEK = datetime.timedelta(weeks=1)


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


def _in_last_month(terms: dict[str, Any], now: datetime.datetime) -> dict[str, Any]:
    """The window's times moved back by whole weeks (weekdays and hours kept) so that it begins
    within the last month, where the replayed history is."""
    month_start = now - datetime.timedelta(days=LAST_MONTH_DAYS)
    weeks = max(0, (terms["begins_at"] - month_start) // WEEK)
    moved = {key: terms[key] - weeks * WEEK if terms.get(key) else None for key in ("begins_at", "ends_at")}
    return {key: value.isoformat() for key, value in moved.items() if value is not None}


def _window_change(params: Any, quota: int, now: datetime.datetime) -> dict[str, Any] | None:
    """The window the window form describes, as a what-if's window change (None where the form's
    times or numbers do not make one)."""
    data = MultiValueDict({key.removeprefix("window_"): params.getlist(key) for key in params})
    terms_form = WindowTermsFields(data)
    deltas = {target: data.get(source) for source, target in (("limit_delta", "limit_delta"),
                                                              ("guaranteed_delta", "guarantee_delta")) if data.get(source)}
    if not deltas or not terms_form.is_valid():
        return None
    terms = terms_form.terms()
    change: dict[str, Any] = {"kind": "window", "quota": quota, **deltas, **_in_last_month(terms, now)}
    if terms["kind"] == "recurring":
        change.update(rrule=terms["rrule"], timezone=terms["timezone"] or "UTC", duration_minutes=terms["duration_minutes"])
    if data.get("shrink_policy") in ShrinkPolicy.values:
        change["shrink_policy"] = data["shrink_policy"]
    share = data.get("priority_class")
    if share and str(share).isdigit():  # a window of one class's share: that class's, by name
        name = PriorityClass.objects.filter(pk=int(share)).values_list("name", flat=True).first()
        if name is not None:
            change["priority_class"] = name
    return change


def initial_from_window(params: Any) -> dict[str, Any]:
    """The what-if a quota window's form asks for: that window over the last month (moved back by
    whole weeks to begin within it), replayed with the windows in force."""
    initial: dict[str, Any] = {}
    quota = params.get("window_quota") or params.get("quota")
    if quota and str(quota).isdigit():
        initial.update(quota=int(quota), history_days=LAST_MONTH_DAYS)
        change = _window_change(params, int(quota), clock_now())
        if change is not None:
            initial["changes_json"] = json.dumps([change])
        initial["title"] = "What a quota window would have done last month"
    return initial
