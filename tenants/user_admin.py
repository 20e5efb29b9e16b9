"""The Django admin's accounts, audited: an account created or changed there, and above all a
password set by an administrator for someone else, are in the audit log with who did it to whom.
A password set for another account is the one way left for an operator to sign in as someone
else (tokens: ``tenants.token_admin``); it is not forbidden (a local account's owner may need a
reset) but it is never silent: the event names the administrator and the account, and the
account's sessions end with its old password (Django's session hash)."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth.admin import UserAdmin
from django.contrib.auth.models import User
from django.db import transaction
from django.forms import ModelForm
from django.http import HttpRequest, HttpResponse

from audit import actions
from audit.admin_base import plain_value
from audit.services import audit_record

NOT_RECORDED = frozenset({"password", "password1", "password2", "usable_password", "last_login"})
"""Never written to the audit log (a hash, the typed passwords) or not an edit (last sign-in)."""


class AuditedUserAdmin(UserAdmin):  # type: ignore[type-arg]
    def save_model(self, request: HttpRequest, obj: User, form: ModelForm, change: bool) -> None:  # type: ignore[type-arg]
        super().save_model(request, obj, form, change)
        if change:
            self._record_change(request, obj, form)
            return
        audit_record(
            actor=request.user, action=actions.ACCOUNT_CREATED_ADMIN, target=obj,
            after={"username": obj.get_username()},
            details={"via": "admin", "local_sign_in": obj.has_usable_password()},
        )

    def _record_change(self, request: HttpRequest, obj: User, form: ModelForm) -> None:  # type: ignore[type-arg]
        fields = [name for name in form.changed_data if name not in NOT_RECORDED]
        if not fields:
            return
        audit_record(
            actor=request.user, action=actions.ACCOUNT_CHANGED_ADMIN, target=obj,
            before={name: plain_value(form.initial.get(name)) for name in fields},
            after={name: plain_value(form.cleaned_data.get(name)) for name in fields},
            details={"via": "admin", "username": obj.get_username()},
        )

    def user_change_password(self, request: HttpRequest, id: str, form_url: str = "") -> HttpResponse:  # noqa: A002 - Django's name
        """Django's password form, with the event in the same transaction as the new password."""
        with transaction.atomic():
            response = super().user_change_password(request, id, form_url)
            if request.method == "POST" and response.status_code == 302:  # the form was valid and saved
                user = User.objects.get(pk=id)
                audit_record(
                    actor=request.user, action=actions.ACCOUNT_PASSWORD_SET, target=user,
                    details={"via": "admin", "username": user.get_username(),
                             "own": request.user.pk == user.pk, "usable": user.has_usable_password()},
                )
        return response


admin.site.unregister(User)
admin.site.register(User, AuditedUserAdmin)
