"""Django admin edits go to the audit log like every other change."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db import models
from django.forms import ModelForm
from django.http import HttpRequest

from audit.actions import AuditAction
from audit.services import audit_record


def plain_value(value: Any) -> Any:
    """A value as the audit log can hold it (a model as its text, a list item by item)."""
    if isinstance(value, models.Model):
        return str(value)
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple, models.QuerySet)):
        return [plain_value(item) for item in value]
    return str(value)


class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Rows that change only through services (which audit them), or never: nothing can be
    added, changed or deleted here."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class AuditedAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Writes ``audit_created`` / ``audit_updated`` events for each save made in the admin.
    The admin wraps each change in a transaction, so the event commits with the change."""

    audit_created: AuditAction
    audit_updated: AuditAction
    audit_deleted: AuditAction | None = None

    def department_id_of(self, obj: Any) -> int | None:
        return getattr(obj, "department_id", None)

    def save_model(self, request: HttpRequest, obj: Any, form: ModelForm, change: bool) -> None:  # type: ignore[type-arg]
        super().save_model(request, obj, form, change)
        fields = form.changed_data
        audit_record(
            actor=request.user,
            action=self.audit_updated if change else self.audit_created,
            target=obj,
            department_id=self.department_id_of(obj),
            before={name: plain_value(form.initial.get(name)) for name in fields} if change else {},
            after={name: plain_value(form.cleaned_data.get(name)) for name in fields},
            details={"via": "admin"},
        )

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.audit_deleted is not None and super().has_delete_permission(request, obj)

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        assert self.audit_deleted is not None
        audit_record(
            actor=request.user,
            action=self.audit_deleted,
            target=obj,
            department_id=self.department_id_of(obj),
            before={"object": str(obj)},
            details={"via": "admin"},
        )
        super().delete_model(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        for obj in queryset:
            self.delete_model(request, obj)
