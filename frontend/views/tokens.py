"""The "API tokens" page (``/account/tokens/``): a signed-in user's own personal access tokens.

Create one (name, scope, expiry): its text is shown once, on the answer to the form, with a copy
button, and never again; the answer is not cached. List them (active, expired, revoked, last used)
and revoke one after a confirmation page. A token a platform admin issued for the user is listed as
pending, with who issued it and why; **Claim** shows its text, once, to its owner only. Everyone signed in may open it, with or without a role:
the tokens act with whatever the user's roles allow. With HTMX the form swaps only its own panel
and the list; without scripts every step is a whole page.
"""

from __future__ import annotations

import datetime
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from frontend.forms import DescribedFieldsMixin
from frontend.http import form_add_service_error, portal_user
from kernel.clock import clock_now
from kernel.errors import ApplicationError
from kernel.words import counted
from tenants.access_tokens import (
    NAME_MAX_LENGTH,
    IssuedToken,
    access_token_claim,
    access_token_create,
    access_token_get,
    access_token_list,
    access_token_revoke,
    token_default_days,
    token_max_days,
    token_state,
)
from tenants.models import TokenScope

EXPIRY_CHOICES_DAYS = (7, 30, 90, 180, 365)


def expiry_choices() -> list[tuple[str, str]]:
    """The offered lifetimes, within the maximum, the default and the maximum always among them."""
    days = sorted({d for d in EXPIRY_CHOICES_DAYS if d <= token_max_days()} | {token_default_days(), token_max_days()})
    return [(str(d), counted(d, "day")) for d in days]


class TokenCreateForm(DescribedFieldsMixin, forms.Form):
    name = forms.CharField(max_length=NAME_MAX_LENGTH, help_text="What it is for: “laptop CLI”, “CI pipeline”.")
    scope = forms.ChoiceField(
        choices=[(TokenScope.READ, "Read only: it may only look (GET)"),
                 (TokenScope.WRITE, "Read and write: whatever your roles allow")],
        initial=TokenScope.READ, widget=forms.RadioSelect(attrs={"class": "radio-choices"}),
    )
    expires_in_days = forms.TypedChoiceField(label="Expires in", coerce=int, choices=[])

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        lifetime = self.fields["expires_in_days"]
        assert isinstance(lifetime, forms.TypedChoiceField)
        lifetime.choices = expiry_choices()
        lifetime.initial = str(token_default_days())
        self.describe_fields()


def _context(user: User, *, form: TokenCreateForm, issued: IssuedToken | None = None) -> dict[str, Any]:
    now = clock_now()
    tokens = [(token, token_state(token, now=now)) for token in access_token_list(user=user, now=now)]
    return {"title": "API tokens", "form": form, "issued": issued, "tokens": tokens,
            "max_days": token_max_days(), "default_days": token_default_days()}


@never_cache
@require_http_methods(["GET", "POST"])
@login_required
def api_tokens(request: HttpRequest) -> HttpResponse:
    user = portal_user(request)
    if request.method != "POST":
        return render(request, "frontend/api_tokens.html", _context(user, form=TokenCreateForm()))
    form = TokenCreateForm(request.POST)
    issued: IssuedToken | None = None
    if form.is_valid():
        data = form.cleaned_data
        try:
            issued = access_token_create(
                actor=user, name=data["name"], scope=data["scope"], via="portal",
                expires_at=clock_now() + datetime.timedelta(days=data["expires_in_days"]),
            )
        except ApplicationError as error:
            form_add_service_error(form, error, field_map={"expires_at": "expires_in_days"})
    context = _context(user, form=TokenCreateForm() if issued else form, issued=issued)
    status = 200 if issued else 400
    template = "frontend/_api_tokens_partial.html" if request.headers.get("HX-Request") else "frontend/api_tokens.html"
    return render(request, template, context, status=status)


@never_cache
@require_http_methods(["POST"])
@login_required
def api_token_claim(request: HttpRequest, token_id: int) -> HttpResponse:
    """The text of a token a platform admin issued for the signed-in user, shown once (anyone
    else's token is a 404; one already claimed, revoked or expired says so)."""
    user = portal_user(request)
    try:
        issued = access_token_claim(actor=user, token_id=token_id, via="portal")
    except ApplicationError as error:
        messages.error(request, error.message)
        return redirect("api-tokens")
    return render(request, "frontend/api_tokens.html", _context(user, form=TokenCreateForm(), issued=issued))


@require_http_methods(["GET", "POST"])
@login_required
def api_token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    """GET: the confirmation; POST: revoke (someone else's token is a 404)."""
    user = portal_user(request)
    token = access_token_get(user=user, token_id=token_id)
    if request.method == "POST":
        access_token_revoke(actor=user, token_id=token.pk, via="portal")
        messages.success(request, f"Token “{token.name}” ({token.prefix}…) is revoked: it no longer works.")
        return redirect("api-tokens")
    return render(request, "frontend/api_token_revoke.html",
                  {"title": "Revoke a token", "token": token, "state": token_state(token)})
