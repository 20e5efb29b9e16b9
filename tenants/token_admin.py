"""Personal access tokens in the admin site: every user's tokens, read-only, with one action for
platform admins, "Revoke selected tokens" (``access_token_revoke``, audited ``access_token.revoked``
with ``via: admin``). Nobody adds or edits tokens here, and the text of a token is nowhere to read."""

from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.http import Http404, HttpRequest

from audit.admin_base import ReadOnlyAdmin
from tenants.access_tokens import access_token_revoke
from tenants.models import PersonalAccessToken


@admin.register(PersonalAccessToken)
class PersonalAccessTokenAdmin(ReadOnlyAdmin):
    list_display = ["prefix", "name", "user", "scope", "created_at", "expires_at", "last_used_at", "revoked_at"]
    list_filter = ["scope", ("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["prefix", "name", "user__username"]
    list_select_related = ["user"]
    exclude = ["key_hash"]
    actions = ["revoke"]

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
