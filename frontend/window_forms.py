"""Forms of the quota calendar: ask for a quota window, decide on one. Input parsing only: the
rules (times, RRULE, values, four-eyes) are ``allocations.windows.services``'s, whose refusals the
views show next to the fields they name."""

from __future__ import annotations

import datetime
from typing import Any
from zoneinfo import ZoneInfo

from django import forms
from django.db.models import QuerySet

from allocations.models import PriorityClass, Quota
from allocations.models.windows import ShrinkPolicy, WindowKind
from allocations.quotas.wording import quota_scope_name
from allocations.windows.terms import WindowTerms
from frontend.forms import DATETIME_INPUT_FORMATS, DateTimeLocalInput, DescribedFieldsMixin, PriorityClassChoiceField
from frontend.window_presets import (
    ADVANCED,
    DAILY,
    ONCE,
    PRESETS,
    WEEKDAYS,
    daily_minutes,
    daily_rule,
    daily_terms,
    day_start,
    in_zone,
    zone_choices,
)
from kernel.clock import clock_now
from kernel.limits import TEXT_LIMIT
from kernel.numbers import plain

POLICIES = ((ShrinkPolicy.WAIT, "Wait"), (ShrinkPolicy.RECLAIM, "Reclaim"))
# The service names these; the form's fields are called differently (a day/night preset's terms
# come from its own fields: a refusal of them is shown next to the field it came from).
SERVICE_FIELDS = {"duration": "duration_minutes"}
DAILY_FIELDS = {"rrule": "daily_from", "duration": "daily_until", "begins_at": "first_day", "ends_at": "last_day"}
NUMBERS_HELP = ("Optional, but at least one of the four. For the limit and for the guarantee, either a change or a value, "
                "not both. In the quota's units: whole units for a flavor's quota, GPU-equivalents for a total.")


class QuotaChoiceField(forms.ModelChoiceField):  # type: ignore[type-arg]
    def label_from_instance(self, obj: Any) -> str:
        assert isinstance(obj, Quota)
        return f"{quota_scope_name(obj.flavor)} (guaranteed {plain(obj.guaranteed)}, limit {plain(obj.limit)})"


def _number(label: str, help_text: str) -> forms.DecimalField:
    return forms.DecimalField(required=False, max_digits=10, decimal_places=4, label=label, help_text=help_text)


def _moment(label: str, help_text: str) -> forms.DateTimeField:
    return forms.DateTimeField(required=False, input_formats=DATETIME_INPUT_FORMATS, widget=DateTimeLocalInput(),
                               label=label, help_text=help_text)


class WindowTermsFields(forms.Form):
    """When the window is in force: a preset (once, day/night) or the rule itself (advanced)."""

    kind = forms.ChoiceField(choices=PRESETS, initial=ONCE, widget=forms.RadioSelect, label="How it repeats")
    timezone = forms.ChoiceField(
        choices=zone_choices, required=False, label="Time zone",
        help_text="The zone every time below is in. A day/night or advanced window follows its hours (summer time "
                  "included); a window once may leave it empty for UTC.",
    )
    begins_at = _moment("Begins", "Once: when it starts. Advanced: its first occurrence.")
    ends_at = _moment("Ends", "Once: when it ends. Advanced: optional, no occurrence starts after it.")
    daily_from = forms.TimeField(required=False, widget=forms.TimeInput(attrs={"type": "time"}), label="Each day from",
                                 help_text="Day/night: when each occurrence starts, e.g. 20:00.")
    daily_until = forms.TimeField(required=False, widget=forms.TimeInput(attrs={"type": "time"}), label="Each day until",
                                  help_text="Day/night: when it ends; at or before the start, the next morning "
                                            "(20:00 to 08:00 is 12 hours).")
    weekdays = forms.MultipleChoiceField(choices=WEEKDAYS, required=False, widget=forms.CheckboxSelectMultiple,
                                         initial=[code for code, _label in WEEKDAYS], label="On these days",
                                         help_text="Day/night: the days an occurrence starts on.")
    first_day = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}), label="First day",
                                help_text="Day/night: optional, today by default.")
    last_day = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}), label="Last day",
                               help_text="Day/night: optional; no end by default.")
    rrule = forms.CharField(required=False, max_length=500, label="Rule (RRULE)",
                            help_text="Advanced: e.g. FREQ=DAILY;BYHOUR=20;BYMINUTE=0 (at most daily; by default "
                                      "occurrences at least an hour apart).")
    duration_minutes = forms.IntegerField(required=False, min_value=1, label="Duration of each occurrence (minutes)",
                                          help_text="Advanced: 720 is 12 hours.")

    def _require(self, data: dict[str, Any], *names: str) -> None:
        for name in names:
            if data.get(name) in (None, "", []) and name not in self.errors:
                self.add_error(name, self.fields[name].error_messages["required"])

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        kind = data.get("kind")
        if kind == DAILY:
            self._require(data, "timezone", "daily_from", "daily_until")
            if "weekdays" in data and not data["weekdays"]:
                self.add_error("weekdays", "Choose at least one day.")
            starts, ends = data.get("daily_from"), data.get("daily_until")
            if starts is not None and ends is not None and not daily_minutes(starts=starts, ends=ends):
                self.add_error("daily_until", "The end must differ from the start.")
        elif kind in (ONCE, ADVANCED):
            self._require(data, "begins_at")
        return data

    def terms(self) -> dict[str, Any]:
        """The window's times as ``quota_window_create`` takes them, from cleaned data."""
        data = self.cleaned_data
        zone = data.get("timezone") or ""
        if data["kind"] == DAILY:
            written = daily_terms(starts=data["daily_from"], ends=data["daily_until"], weekdays=data["weekdays"])
            first = data.get("first_day") or clock_now().astimezone(ZoneInfo(zone)).date()
            last = data.get("last_day")
            return {"kind": WindowKind.RECURRING, "rrule": written.rrule, "timezone": zone,
                    "duration_minutes": written.duration_minutes, "begins_at": day_start(first, zone),
                    "ends_at": day_start(last + datetime.timedelta(days=1), zone) if last else None}
        ends = data.get("ends_at")
        times = {"begins_at": in_zone(data["begins_at"], zone), "ends_at": in_zone(ends, zone) if ends else None}
        if data["kind"] == ONCE:
            return {"kind": WindowKind.TEMPORARY, **times}
        return {"kind": WindowKind.RECURRING, **times, "rrule": (data.get("rrule") or "").strip(), "timezone": zone,
                "duration_minutes": data.get("duration_minutes")}

    @property
    def written_rule(self) -> str:
        """The rule the day/night preset writes from what was sent (empty until its hours parse)."""
        data = getattr(self, "cleaned_data", {})
        if data.get("daily_from") is None or not data.get("weekdays"):
            return ""
        return daily_rule(starts=data["daily_from"], weekdays=data["weekdays"])

    def service_fields(self) -> dict[str, str]:
        """The service's field names → this form's, for the preset chosen."""
        return DAILY_FIELDS if self.cleaned_data.get("kind") == DAILY else SERVICE_FIELDS


class WindowRequestForm(DescribedFieldsMixin, WindowTermsFields):
    quota = QuotaChoiceField(queryset=Quota.objects.none(), empty_label="Choose a quota")
    limit_delta = _number("Limit: change by", "E.g. 4 or -2: added to the limit while in force.")
    limit = _number("Limit: set to", "Or the limit while in force.")
    guaranteed_delta = _number("Guarantee: change by", "Added to the guarantee while in force.")
    guaranteed = _number("Guarantee: set to", "Or the guarantee while in force.")
    priority_class = PriorityClassChoiceField(
        queryset=PriorityClass.objects.none(), required=False, empty_label="The whole quota (every class)",
        label="Priority class", help_text="Optional: changes only this class's share of the quota (a day/night split).",
    )
    shrink_policy = forms.ChoiceField(
        choices=POLICIES, initial=ShrinkPolicy.WAIT, label="When the quota shrinks",
        help_text="Wait: grants above the lower value run to their end, new requests above it are refused. "
                  "Reclaim: they are reclaimed, with their notice.",
    )
    justification = forms.CharField(max_length=TEXT_LIMIT, widget=forms.Textarea(attrs={"rows": 3}),
                                    help_text="Why the department needs it; the deciding platform admin reads this.")

    numbers_help = NUMBERS_HELP
    field_order = ["quota", "kind", "timezone"]
    WHEN_NAMES = ("begins_at", "ends_at")
    DAILY_NAMES = ("daily_from", "daily_until", "weekdays", "first_day", "last_day")
    ADVANCED_NAMES = ("rrule", "duration_minutes")
    NUMBER_NAMES = ("limit_delta", "limit", "guaranteed_delta", "guaranteed")
    REST_NAMES = ("priority_class", "shrink_policy", "justification")

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

    def group(self, names: tuple[str, ...]) -> list[forms.BoundField]:
        return [self[name] for name in names]

    def groups(self) -> dict[str, list[forms.BoundField]]:
        """The fields as the template sets them out, one group per fieldset."""
        return {"when": self.group(self.WHEN_NAMES), "daily": self.group(self.DAILY_NAMES), "advanced": self.group(self.ADVANCED_NAMES),
                "numbers": self.group(self.NUMBER_NAMES), "rest": self.group(self.REST_NAMES)}

    def service_arguments(self) -> dict[str, Any]:
        """The keywords of ``quota_window_create`` (less ``actor``) from cleaned data."""
        data = self.cleaned_data
        priority_class = data.get("priority_class")
        terms = WindowTerms(
            **self.terms(), guaranteed_delta=data.get("guaranteed_delta"), limit_delta=data.get("limit_delta"),
            guaranteed=data.get("guaranteed"), limit=data.get("limit"),
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
