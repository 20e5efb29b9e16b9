"""Forms of the quota calendar: ask for a quota window, decide on one. Input parsing only: the
rules (times, RRULE, values, four-eyes) are ``allocations.windows.services``'s, whose refusals the
views show next to the fields they name."""

from __future__ import annotations

from typing import Any

from django import forms
from django.db.models import QuerySet

from allocations.models import PriorityClass, Quota
from allocations.models.windows import ShrinkPolicy, WindowKind
from allocations.quotas.wording import quota_scope_name
from allocations.windows.terms import WindowTerms
from frontend.forms import DATETIME_INPUT_FORMATS, DateTimeLocalInput, DescribedFieldsMixin, PriorityClassChoiceField
from kernel.limits import TEXT_LIMIT
from kernel.numbers import plain

KINDS = ((WindowKind.TEMPORARY, "Temporary (once)"), (WindowKind.RECURRING, "Recurring (RRULE)"))
POLICIES = ((ShrinkPolicy.WAIT, "Wait"), (ShrinkPolicy.RECLAIM, "Reclaim"))
# The service names these; the form's fields are called differently.
SERVICE_FIELDS = {"duration": "duration_minutes"}


class QuotaChoiceField(forms.ModelChoiceField):  # type: ignore[type-arg]
    def label_from_instance(self, obj: Any) -> str:
        assert isinstance(obj, Quota)
        return f"{quota_scope_name(obj.flavor)} (guaranteed {plain(obj.guaranteed)}, limit {plain(obj.limit)})"


def _number(label: str, help_text: str) -> forms.DecimalField:
    return forms.DecimalField(required=False, max_digits=10, decimal_places=4, label=label, help_text=help_text)


class WindowRequestForm(DescribedFieldsMixin, forms.Form):
    quota = QuotaChoiceField(queryset=Quota.objects.none(), empty_label="Choose a quota")
    kind = forms.ChoiceField(choices=KINDS, initial=WindowKind.TEMPORARY,
                             help_text="Temporary: from its start to its end. Recurring: each occurrence of its rule.")
    begins_at = forms.DateTimeField(
        input_formats=DATETIME_INPUT_FORMATS, widget=DateTimeLocalInput(), label="Begins (UTC)",
        help_text="A recurring window's first occurrence: its rule repeats it, in its time zone.",
    )
    ends_at = forms.DateTimeField(
        required=False, input_formats=DATETIME_INPUT_FORMATS, widget=DateTimeLocalInput(), label="Ends (UTC)",
        help_text="Needed for a temporary window; optional for a recurring one (no occurrence starts after it).",
    )
    rrule = forms.CharField(required=False, max_length=500, label="Rule (RRULE)",
                            help_text="Recurring only, e.g. FREQ=DAILY;BYHOUR=20;BYMINUTE=0 (at most daily; "
                                      "by default occurrences at least an hour apart).")
    timezone = forms.CharField(required=False, max_length=64, label="Time zone",
                               help_text="Recurring only: the IANA zone its hours follow, e.g. Europe/Berlin.")
    duration_minutes = forms.IntegerField(required=False, min_value=1, label="Duration of each occurrence (minutes)",
                                          help_text="Recurring only: 720 is 12 hours.")
    limit_delta = _number("Limit change", "Added to the limit while in force, e.g. 4 or -2.")
    limit = _number("Limit (absolute)", "Or the limit while in force; not with a limit change.")
    guaranteed_delta = _number("Guarantee change", "Added to the guarantee while in force.")
    guaranteed = _number("Guarantee (absolute)", "Or the guarantee while in force; not with a guarantee change.")
    priority_class = PriorityClassChoiceField(
        queryset=PriorityClass.objects.none(), required=False, empty_label="The whole quota (every class)",
        label="Priority class", help_text="Changes only this class's share of the quota (a day/night split).",
    )
    shrink_policy = forms.ChoiceField(
        choices=POLICIES, initial=ShrinkPolicy.WAIT, label="When the quota shrinks",
        help_text="Wait: grants above the lower value run to their end, new requests above it are refused. "
                  "Reclaim: they are reclaimed, with their notice.",
    )
    justification = forms.CharField(max_length=TEXT_LIMIT, widget=forms.Textarea(attrs={"rows": 3}),
                                    help_text="Why the department needs it; the deciding platform admin reads this.")

    def __init__(self, *args: Any, quotas: QuerySet[Quota], priority_classes: QuerySet[PriorityClass],
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        quota = self.fields["quota"]
        assert isinstance(quota, forms.ModelChoiceField)
        quota.queryset = quotas
        priority_class = self.fields["priority_class"]
        assert isinstance(priority_class, forms.ModelChoiceField)
        priority_class.queryset = priority_classes
        self.auto_id = "id_window_%s"
        for name, field in self.fields.items():
            ids = ([f"id_window_{name}_helptext"] if field.help_text else []) + [f"id_window_{name}_error"]
            field.widget.attrs["aria-describedby"] = " ".join(ids)

    def service_arguments(self) -> dict[str, Any]:
        """The keywords of ``quota_window_create`` (less ``actor``) from cleaned data."""
        data = self.cleaned_data
        recurring = data["kind"] == WindowKind.RECURRING
        priority_class = data.get("priority_class")
        terms = WindowTerms(
            kind=data["kind"], begins_at=data["begins_at"], ends_at=data.get("ends_at"),
            rrule=(data.get("rrule") or "").strip() if recurring else "",
            timezone=(data.get("timezone") or "").strip() if recurring else "",
            duration_minutes=data.get("duration_minutes") if recurring else None,
            **{name: data.get(name) for name in ("guaranteed_delta", "limit_delta", "guaranteed", "limit")},
            priority_class_id=priority_class.pk if priority_class is not None else None,
            shrink_policy=data["shrink_policy"],
        )
        return {"quota_id": data["quota"].pk, "terms": terms, "justification": data["justification"]}


class WindowDecisionForm(forms.Form):
    """Approve or reject one pending window, with a comment (required to reject)."""

    decision = forms.ChoiceField(choices=(("approve", "Approve"), ("reject", "Reject")))
    comment = forms.CharField(max_length=TEXT_LIMIT, required=False)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("decision") == "reject" and not str(data.get("comment", "")).strip():
            self.add_error("comment", "A rejection needs a comment for the requester.")
        return data
