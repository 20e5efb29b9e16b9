"""Personal access tokens in the admin site: every user's tokens, read-only, with one action for
platform admins, "Revoke selected tokens" (``access_token_revoke``, audited ``access_token.revoked``
with ``via: admin``), and one form, "Add", by which a platform admin *issues* a token for someone
else (``access_token_issue``, audited ``access_token.issued`` naming the issuer, the owner and the
reason). An issued token has no text until its owner claims it, signed in as themselves: the text
of a token is nowhere to read here, and nobody gets a key that acts as someone else."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.http import Http404, HttpRequest

from audit.admin_base import ReadOnlyAdmin
from kernel.clock import clock_now
from kernel.errors import ApplicationError
from tenants.access import access_for
from tenants.access_tokens import REASON_MAX_LENGTH, access_token_issue, access_token_revoke, token_expiry_check
from tenants.models import PersonalAccessToken


class TokenIssueForm(forms.ModelForm):  # type: ignore[type-arg]
    """The fields of a token issued for someone else; the text is made only when its owner claims it."""

    expires_at = forms.DateTimeField(
        required=False, help_text="Empty: the default lifetime (GPUPORTAL_TOKEN_DEFAULT_DAYS). A time zone is required.",
    )
    issue_reason = forms.CharField(
        label="Reason", max_length=REASON_MAX_LENGTH, widget=forms.Textarea(attrs={"rows": 3}),
        help_text="Why you issue a token for someone else: it is audited and shown to its owner.",
    )
    request: HttpRequest

    class Meta:
        model = PersonalAccessToken
        fields = ["user", "name", "scope", "expires_at", "issue_reason"]
        help_texts = {"user": "Its owner. You will not see the token's text: only its owner can claim it, "
                              "on their API tokens page or with POST /api/v1/auth/tokens/{id}/claim/."}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        owner = self.fields["user"]
        assert isinstance(owner, forms.ModelChoiceField)
        owner.queryset = User.objects.filter(is_active=True).order_by("username")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        user = data.get("user")
        if user is not None and user.pk == self.request.user.pk:
            self.add_error("user", "Create your own tokens on your API tokens page, not by issuing them.")
        if data.get("expires_at") is not None:
            try:
                token_expiry_check(expires_at=data["expires_at"], now=clock_now())
            except ApplicationError as error:
                self.add_error("expires_at", error.message)
        return data


@admin.register(PersonalAccessToken)
class PersonalAccessTokenAdmin(ReadOnlyAdmin):
    list_display = ["prefix", "name", "user", "scope", "created_at", "expires_at", "last_used_at", "revoked_at",
                    "issued_by", "claimed_at"]
    list_filter = ["scope", ("revoked_at", admin.EmptyFieldListFilter), ("issued_by", admin.EmptyFieldListFilter)]
    search_fields = ["prefix", "name", "user__username"]
    list_select_related = ["user", "issued_by"]
    exclude = ["key_hash"]
    actions = ["revoke"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        """Platform admins issue tokens for others (never see their text); nobody else adds any."""
        user = request.user
        return isinstance(user, User) and access_for(user).is_platform_admin and super(ReadOnlyAdmin, self).has_add_permission(request)

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        if obj is not None:
            return super().get_form(request, obj, change=change, **kwargs)

        class BoundTokenIssueForm(TokenIssueForm):
            pass

        BoundTokenIssueForm.request = request
        return BoundTokenIssueForm

    def save_model(self, request: HttpRequest, obj: PersonalAccessToken, form: Any, change: bool) -> None:
        actor = request.user
        if change or not isinstance(actor, User):
            raise Http404("Tokens are not edited here.")
        data = form.cleaned_data
        token = access_token_issue(
            actor=actor, user=data["user"], name=data["name"], scope=data["scope"], reason=data["issue_reason"],
            expires_at=data.get("expires_at"), via="admin",
        )
        obj.pk = token.pk
        obj.prefix = token.prefix

    def response_add(self, request: HttpRequest, obj: PersonalAccessToken, post_url_continue: str | None = None) -> Any:
        self.message_user(
            request,
            f"Token “{obj.name}” ({obj.prefix}…) issued for {obj.user.get_username()}. It has no text yet and works "
            "nowhere until its owner claims it on their API tokens page; you will not see it.",
            messages.SUCCESS,
        )
        return self.response_post_save_add(request, obj)

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[PersonalAccessToken]) -> None:
        actor = request.user
        if not isinstance(actor, User):
            return
        revoked = 0
        for token in queryset.filter(revoked_at__isnull=True):
            try:
                access_token_revoke(actor=actor, token_id=token.pk, via="admin")
            except Http404:
                self.message_user(request, "Only platform admins revoke other users' tokens.", messages.ERROR)
                return
            revoked += 1
        self.message_user(request, f"{revoked} token(s) revoked.", messages.SUCCESS)
