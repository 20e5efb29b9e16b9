"""Small helpers shared by the portal's views."""

from __future__ import annotations

from collections.abc import Mapping

from django import forms
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest

from kernel.errors import ApplicationError


def portal_user(request: HttpRequest) -> User:
    """The logged-in user (views are behind ``login_required``)."""
    user = request.user
    if not isinstance(user, User):
        raise PermissionDenied("Log in first.")
    return user


def form_add_service_error(
    form: forms.Form, error: ApplicationError, *, field_map: Mapping[str, str] | None = None
) -> None:
    """Show a service's refusal on the form: next to the fields it names, otherwise at the top."""
    placed = False
    for service_field, messages in error.fields.items():
        field = (field_map or {}).get(service_field, service_field)
        if field in form.fields:
            for message in messages:
                form.add_error(field, message)
            placed = True
    if not placed:
        form.add_error(None, error.message)
