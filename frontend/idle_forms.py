"""Forms of the idle-grant inbox: keep (with a reason), exempt (until a date, with a reason),
release (an optional comment). Input parsing only: the rules are ``accounting.idle.cases``'s, whose
refusals the view shows next to the fields they name."""

from __future__ import annotations

from django import forms

from frontend.forms import DATETIME_INPUT_FORMATS, DateTimeLocalInput
from kernel.limits import TEXT_LIMIT


class IdleKeepForm(forms.Form):
    reason = forms.CharField(max_length=TEXT_LIMIT, label="Why keep it", help_text="Seen by the department's admins.")


class IdleExemptForm(forms.Form):
    until = forms.DateTimeField(input_formats=DATETIME_INPUT_FORMATS, widget=DateTimeLocalInput(), label="Exempt until (UTC)")
    reason = forms.CharField(max_length=TEXT_LIMIT, label="Why exempt it")


class IdleReleaseForm(forms.Form):
    comment = forms.CharField(max_length=TEXT_LIMIT, required=False, label="Comment (optional)")


FORMS: dict[str, type[forms.Form]] = {"keep": IdleKeepForm, "exempt": IdleExemptForm, "release": IdleReleaseForm}
