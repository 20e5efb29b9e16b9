"""Portal forms: input parsing only; the rules live in the services they feed."""

from __future__ import annotations

import datetime
from typing import Any

from django import forms
from django.conf import settings
from django.contrib.auth.models import User
from django.core.validators import MaxValueValidator

from allocations.catalogue.selectors import flavor_list, priority_class_default, priority_class_list
from allocations.models import Allocation, Flavor, PriorityClass
from audit.actions import all_actions
from audit.models import Outcome
from clusters.models import Cluster
from clusters.selectors import cluster_list
from frontend.selectors import requestable_projects, servable_flavor_ids
from kernel.clock import clock_now
from kernel.limits import QUANTITY_MAX, TEXT_LIMIT
from kernel.numbers import plain
from kernel.times import DAY, ISO_MINUTE, ISO_SECOND, MINUTE, minute_utc
from tenants.models import Department, Project

DATETIME_INPUT_FORMATS = [ISO_MINUTE, ISO_SECOND, MINUTE, DAY]


class DescribedFieldsMixin:
    """Point every input at its help text and its error slot (``id_<name>_error``), which the
    templates always render, so that errors shown later by the live feedback are announced too."""

    fields: dict[str, forms.Field]

    def describe_fields(self) -> None:
        for name, field in self.fields.items():
            ids = ([f"id_{name}_helptext"] if field.help_text else []) + [f"id_{name}_error"]
            field.widget.attrs["aria-describedby"] = " ".join(ids)


class DateTimeLocalInput(forms.DateTimeInput):
    input_type = "datetime-local"

    def __init__(self, attrs: dict[str, Any] | None = None) -> None:
        super().__init__(attrs=attrs, format=ISO_MINUTE)


class FlavorChoiceField(forms.ModelChoiceField):  # type: ignore[type-arg]
    def label_from_instance(self, obj: Any) -> str:
        assert isinstance(obj, Flavor)
        return f"{obj.display_name} ({obj.name}, {plain(obj.gpu_equivalents)} GPU-eq. per unit)"


class PriorityClassChoiceField(forms.ModelChoiceField):  # type: ignore[type-arg]
    def label_from_instance(self, obj: Any) -> str:
        assert isinstance(obj, PriorityClass)
        return f"{obj.name} — {obj.description}" if obj.description else obj.name


class ProjectChoiceField(forms.ModelChoiceField):  # type: ignore[type-arg]
    def label_from_instance(self, obj: Any) -> str:
        assert isinstance(obj, Project)
        return f"{obj.name} ({obj.slug}, {obj.department.slug})"


class ClusterChoiceField(forms.ModelChoiceField):  # type: ignore[type-arg]
    def label_from_instance(self, obj: Any) -> str:
        assert isinstance(obj, Cluster)
        return obj.display_name or obj.name


class AllocationRequestForm(DescribedFieldsMixin, forms.Form):
    project = ProjectChoiceField(queryset=Project.objects.none(), empty_label="Choose a project")
    flavor = FlavorChoiceField(
        queryset=Flavor.objects.none(), empty_label="Choose a GPU flavor",
        error_messages={"invalid_choice": "Choose one of the flavors offered: no active cluster can serve the one chosen."},
    )
    quantity = forms.IntegerField(min_value=1, max_value=QUANTITY_MAX, initial=1, help_text="Units of the flavor.")
    priority_class = PriorityClassChoiceField(queryset=PriorityClass.objects.none(), empty_label=None)
    cluster = ClusterChoiceField(
        queryset=Cluster.objects.none(), required=False, empty_label="Any cluster with room",
        help_text="Leave as is to let the portal choose on approval.",
    )
    starts_at = forms.DateTimeField(
        required=False, input_formats=DATETIME_INPUT_FORMATS, widget=DateTimeLocalInput(),
        label="Start (UTC)", help_text="Empty: as soon as it is approved.",
    )
    duration_days = forms.IntegerField(min_value=1, initial=7, label="Duration (days)")
    justification = forms.CharField(
        max_length=TEXT_LIMIT, widget=forms.Textarea(attrs={"rows": 3}),
        help_text="What the GPUs are for; your department admin reads this.",
    )
    confirm = forms.BooleanField(
        required=False, label="I understand what approval would do",
        help_text="Asked when approval would reclaim others' grants, or could not be granted as things stand.",
    )

    def __init__(self, *args: Any, user: User, servable_only: bool = True, **kwargs: Any) -> None:
        """``servable_only``: offer only the flavors some active cluster can serve (the form);
        the live feedback accepts every active flavor, to say why one cannot be served."""
        super().__init__(*args, **kwargs)
        self._fields_of(user, servable_only=servable_only)
        duration = self.fields["duration_days"]
        assert isinstance(duration, forms.IntegerField)
        longest = settings.GPUPORTAL_MAX_ALLOCATION_DAYS
        duration.max_value = longest
        duration.validators.append(MaxValueValidator(longest))
        duration.widget.attrs["max"] = str(longest)
        duration.help_text = f"At most {longest} days; renew later if you need more."
        self.describe_fields()

    def _fields_of(self, user: User, *, servable_only: bool) -> None:
        flavors = flavor_list(user=user, active_only=True)
        if servable_only:
            flavors = flavors.filter(pk__in=servable_flavor_ids(flavors=list(flavors)))
        querysets: dict[str, Any] = {
            "project": requestable_projects(user=user),
            "flavor": flavors,
            "priority_class": priority_class_list(user=user),
            "cluster": cluster_list(user=user).filter(is_active=True),
        }
        for name, queryset in querysets.items():
            field = self.fields[name]
            assert isinstance(field, forms.ModelChoiceField)
            field.queryset = queryset
        standard = priority_class_default(user=user)
        if standard is not None:
            self.fields["priority_class"].initial = standard.pk

    def window(self) -> tuple[datetime.datetime | None, datetime.datetime]:
        """The requested start (None: now) and end, from cleaned data."""
        starts_at: datetime.datetime | None = self.cleaned_data.get("starts_at")
        days = int(self.cleaned_data["duration_days"])
        return starts_at, (starts_at or clock_now()) + datetime.timedelta(days=days)


class DecisionForm(DescribedFieldsMixin, forms.Form):
    """Approve or reject one or several pending allocations with one comment."""

    DECISIONS = (("approve", "Approve"), ("reject", "Reject"))

    selected = forms.TypedMultipleChoiceField(coerce=int, required=False, choices=())
    decision = forms.ChoiceField(choices=DECISIONS)
    comment = forms.CharField(max_length=TEXT_LIMIT, required=False, widget=forms.Textarea(attrs={"rows": 2}))

    def __init__(self, *args: Any, pending_ids: list[int], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["selected"]
        assert isinstance(field, forms.TypedMultipleChoiceField)
        field.choices = [(str(pk), f"#{pk}") for pk in pending_ids]
        self.describe_fields()

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if not data.get("selected"):
            self.add_error("selected", "Select at least one request.")
        if data.get("decision") == "reject" and not str(data.get("comment", "")).strip():
            self.add_error("comment", "A rejection needs a comment for the requester.")
        return data


class ChangeFormMixin:
    """The renewal and the resize forms share the allocation page: their inputs' ids, help texts
    and error slots carry the form's name (``id_renew_justification``)."""

    fields: dict[str, forms.Field]
    auto_id: str | bool

    def name_ids(self, prefix: str) -> None:
        self.auto_id = f"id_{prefix}_%s"
        for name, field in self.fields.items():
            ids = ([f"id_{prefix}_{name}_helptext"] if field.help_text else []) + [f"id_{prefix}_{name}_error"]
            field.widget.attrs["aria-describedby"] = " ".join(ids)


def _justification(why: str) -> forms.CharField:
    return forms.CharField(max_length=TEXT_LIMIT, required=False, widget=forms.Textarea(attrs={"rows": 2}),
                           help_text=f"{why}; a department admin reads it when the change needs approval.")


class RenewForm(ChangeFormMixin, forms.Form):
    ends_at = forms.DateTimeField(input_formats=DATETIME_INPUT_FORMATS, widget=DateTimeLocalInput(), label="New end (UTC)")
    justification = _justification("Why it needs longer")

    def __init__(self, *args: Any, self_renew_until: datetime.datetime | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self_renew_until is not None:
            self.fields["ends_at"].help_text = (
                f"Until {minute_utc(self_renew_until)} it applies at once; a later end waits for a "
                "department admin's approval."
            )
        self.name_ids("renew")

    @classmethod
    def for_allocation(cls, allocation: Allocation, *, until: datetime.datetime | None = None) -> RenewForm:
        return cls(initial={"ends_at": allocation.ends_at + datetime.timedelta(days=7)}, self_renew_until=until)


class ResizeForm(ChangeFormMixin, forms.Form):
    quantity = forms.IntegerField(min_value=1, max_value=QUANTITY_MAX, label="New quantity",
                                  help_text="Fewer units apply at once; more wait for a department admin's approval.")
    justification = _justification("Why it needs more units")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.name_ids("resize")

    @classmethod
    def for_allocation(cls, allocation: Allocation) -> ResizeForm:
        return cls(initial={"quantity": allocation.quantity})


class ChangeDecisionForm(forms.Form):
    """Approve or reject one pending change, with a comment (required to reject)."""

    decision = forms.ChoiceField(choices=DecisionForm.DECISIONS)
    comment = forms.CharField(max_length=TEXT_LIMIT, required=False)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("decision") == "reject" and not str(data.get("comment", "")).strip():
            self.add_error("comment", "A rejection needs a comment for the requester.")
        return data


# Readable names of the action families (the code's prefix before its dot) where capitalising
# the prefix is not enough; the others read as the prefix, capitalised, underscores as spaces.
ACTION_FAMILIES = {
    "auth": "Sign-in and permissions",
    "ldap": "Directory (LDAP)",
    "audit": "Audit log",
    "node": "Node",
    "node_token": "Node agent token",
}


def action_family(code: str) -> str:
    prefix = code.split(".", 1)[0]
    return ACTION_FAMILIES.get(prefix, prefix.replace("_", " ").capitalize())


def action_choices() -> list[tuple[str, Any]]:
    """The audit actions grouped by family (``<optgroup>``), families in alphabetical order, each
    action labelled by what it records with its code after it, in registry order within its family."""
    groups: dict[str, list[tuple[str, str]]] = {}
    for action in all_actions():
        groups.setdefault(action_family(action.code), []).append((action.code, f"{action.description} ({action.code})"))
    return [("", "Any action"), *sorted(groups.items())]


class AuditFilterForm(DescribedFieldsMixin, forms.Form):
    start = forms.DateTimeField(required=False, input_formats=DATETIME_INPUT_FORMATS, widget=DateTimeLocalInput(),
                                label="From (UTC)")
    end = forms.DateTimeField(required=False, input_formats=DATETIME_INPUT_FORMATS, widget=DateTimeLocalInput(),
                              label="Until (UTC)")
    department = forms.ModelChoiceField(queryset=Department.objects.none(), required=False,
                                        empty_label="All visible departments")
    actor = forms.CharField(required=False, max_length=150, label="Actor (username)")
    action = forms.ChoiceField(required=False)
    outcome = forms.ChoiceField(required=False, choices=[("", "Any outcome"), *Outcome.choices])

    def __init__(self, *args: Any, departments: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        department = self.fields["department"]
        assert isinstance(department, forms.ModelChoiceField)
        department.queryset = departments
        action = self.fields["action"]
        assert isinstance(action, forms.ChoiceField)
        action.choices = action_choices()
        self.describe_fields()

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        start, end = data.get("start"), data.get("end")
        if start and end and start >= end:
            self.add_error("end", "The end must be after the start.")
        return data
