"""Settings read at call time, typed.

``gpuportal/settings.py`` is the one place that reads the environment and gives every setting its
default; code reads the result here, on each call, so ``override_settings`` and pytest-django's
``settings`` fixture apply. A setting that is missing, or holds a value of the wrong kind, raises
``ImproperlyConfigured`` naming it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


def setting(name: str) -> Any:
    """The setting's value as it stands now; a name the settings do not define is an error."""
    try:
        return getattr(settings, name)
    except AttributeError:
        raise ImproperlyConfigured(f"{name} is not defined in the settings") from None


def setting_str(name: str) -> str:
    value = setting(name)
    if value is None:
        raise ImproperlyConfigured(f"{name} must be set")
    return str(value)


def setting_optional_str(name: str) -> str | None:
    """The setting as text, or ``None`` when it is unset or empty (optional secrets, URLs)."""
    value = setting(name)
    return str(value) if value is not None and value != "" else None


def setting_int(name: str) -> int:
    value = setting(name)
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ImproperlyConfigured(f"{name} must be an integer, got {value!r}") from None


def setting_float(name: str) -> float:
    value = setting(name)
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ImproperlyConfigured(f"{name} must be a number, got {value!r}") from None


def setting_bool(name: str) -> bool:
    return bool(setting(name))


def setting_path(name: str) -> Path:
    return Path(setting_str(name))
