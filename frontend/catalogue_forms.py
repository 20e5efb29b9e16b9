"""The catalogue's forms for platform admins: flavors, quotas and priority classes, created and
edited in the portal. Input parsing only: the rules are the catalogue's (``allocations.rules``),
reached the way the API reaches them: a flavor through ``catalogue.flavor_create``/``flavor_update``,
a quota or a priority class through ``changes.rule_change_propose`` (four-eyes: with
``GPUPORTAL_FOUR_EYES`` on, a pending change for another platform admin, or an emergency with its
reason)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.db.models import QuerySet

from allocations.models import Flavor, PriorityClass
from allocations.models.rule_changes import REASON_LIMIT
from frontend.forms import DescribedFieldsMixin
from kernel.numbers import plain
from tenants.models import Department

FLAVOR_FIELDS = [
    "name", "display_name", "gpu_model", "sharing_mode", "resource_name", "mig_profile", "replicas", "memory_mib",
    "compute_percent", "gpu_equivalents", "cpu_millicores_per_unit", "memory_mib_per_unit", "reserve_percent",
    "reserve_per_unit_mib", "placement_policy", "min_driver_version", "min_cuda_version", "is_active",
]
PRIORITY_CLASS_FIELDS = [
    "name", "value", "preemption_policy", "oversubscription_factor", "description", "notice_minutes", "preemptible",
]


class EmergencyMixin:
    """With four-eyes on, a change of the rules waits for another platform admin unless it is an
    emergency, which states its reason (the service refuses one without, naming ``reason``)."""

    fields: dict[str, forms.Field]

    def add_emergency(self) -> None:
        if not settings.GPUPORTAL_FOUR_EYES:
            return
        self.fields["emergency"] = forms.BooleanField(
            required=False, label="Emergency: apply now",
            help_text="Applies at once instead of waiting for another platform admin; audited with the reason and "
                      "told to the other platform admins.",
        )
        self.fields["reason"] = forms.CharField(
            required=False, max_length=REASON_LIMIT, label="Reason for the emergency",
            help_text="Needed for an emergency.", widget=forms.Textarea(attrs={"rows": 2}),
        )

    def emergency_of(self, data: dict[str, Any]) -> dict[str, Any]:
        return {"emergency": bool(data.pop("emergency", False)), "reason": str(data.pop("reason", "") or "")}


class FlavorForm(DescribedFieldsMixin, forms.ModelForm):  # type: ignore[type-arg]
    # The API's bounds (``allocations.api.grants.FlavorIn``), tighter than the columns'.
    memory_mib = forms.IntegerField(min_value=1, max_value=10_000_000, label="Memory (MiB)",
                                    help_text="GPU memory of one unit in MiB.")
    replicas = forms.IntegerField(min_value=2, max_value=1000, required=False,
                                  help_text="Optional: replicas per GPU (mps and timeslice only).")

    class Meta:
        model = Flavor
        fields = FLAVOR_FIELDS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:
            self.fields["name"].disabled = True
            self.fields["name"].help_text = "A flavor's name is how requests, quotas and the API name it: it stays."
        self.describe_fields()

    def service_fields(self) -> dict[str, Any]:
        """What ``flavor_create`` takes; for an edit, only what changed (``flavor_update``)."""
        data = {name: self.cleaned_data[name] for name in FLAVOR_FIELDS}
        if self.instance.pk is None:
            return data
        data.pop("name")
        return {name: value for name, value in data.items() if name in self.changed_data}


class PriorityClassForm(EmergencyMixin, DescribedFieldsMixin, forms.ModelForm):  # type: ignore[type-arg]
    class Meta:
        model = PriorityClass
        fields = PRIORITY_CLASS_FIELDS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:
            self.fields["name"].disabled = True
            self.fields["name"].help_text = "The Kubernetes PriorityClass's name: it cannot change (create another class)."
        self.add_emergency()
        self.describe_fields()

    def proposal(self) -> dict[str, Any]:
        """The keywords of ``rule_change_propose`` besides its kind, actor and target."""
        data = dict(self.cleaned_data)
        emergency = self.emergency_of(data)
        fields = {name: data[name] for name in PRIORITY_CLASS_FIELDS}
        if self.instance.pk is not None:
            fields = {name: value for name, value in fields.items() if name in self.changed_data and name != "name"}
        return {"fields": fields, **emergency}


class DepartmentChoiceField(forms.ModelChoiceField):  # type: ignore[type-arg]
    def label_from_instance(self, obj: Any) -> str:
        assert isinstance(obj, Department)
        return f"{obj.name} ({obj.slug})"


def _quota_number(label: str, help_text: str, *, required: bool = True) -> forms.DecimalField:
    return forms.DecimalField(max_digits=10, decimal_places=4, min_value=0, required=required, label=label,
                              help_text=help_text)


class QuotaNumbersForm(EmergencyMixin, DescribedFieldsMixin, forms.Form):
    """A quota's numbers: its guarantee, its limit and what of the guarantee it lends."""

    guaranteed = _quota_number("Guaranteed", "What the department is promised, in whole units of the flavor or in "
                                             "GPU-equivalents for a total.")
    limit = _quota_number("Limit", "The most it may hold, borrowing from others; at least the guarantee.")
    lending_limit = _quota_number("Lending limit", "Optional: how much of its unused guarantee it lends to its "
                                                   "siblings; empty: all of it.", required=False)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.add_emergency()
        self.describe_fields()

    def numbers(self, data: dict[str, Any]) -> dict[str, Any]:
        return {name: data.get(name) for name in ("guaranteed", "limit", "lending_limit")}

    def proposal(self) -> dict[str, Any]:
        data = dict(self.cleaned_data)
        emergency = self.emergency_of(data)
        return {"fields": self.numbers(data), **emergency}


class QuotaForm(QuotaNumbersForm):
    """A new quota: the department and its scope (a flavor, or GPU-equivalents across all)."""

    field_order = ["department", "flavor"]

    def __init__(self, *args: Any, departments: QuerySet[Department], flavors: QuerySet[Flavor], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["department"] = DepartmentChoiceField(
            queryset=departments, empty_label="Choose a department",
            help_text="A quota covers the department's whole subtree; setting one that exists replaces it.",
        )
        self.fields["flavor"] = forms.ModelChoiceField(
            queryset=flavors, required=False, empty_label="GPU-equivalents (every flavor together)",
            help_text="Optional: the flavor whose units it counts.",
        )
        self.order_fields(self.field_order)
        self.describe_fields()

    def proposal(self) -> dict[str, Any]:
        data = dict(self.cleaned_data)
        emergency = self.emergency_of(data)
        return {"fields": {"department": data["department"], "flavor": data.get("flavor"), **self.numbers(data)},
                **emergency}


def quota_initial(quota: Any) -> dict[str, str | None]:
    return {name: (plain(getattr(quota, name)) if getattr(quota, name) is not None else None)
            for name in ("guaranteed", "limit", "lending_limit")}
