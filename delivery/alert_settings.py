"""The alert thresholds in the settings (``GPUPORTAL_ALERT_*``, gpuportal/settings.py), checked."""

from __future__ import annotations

from dataclasses import fields

from django.core.exceptions import ImproperlyConfigured

from delivery.alert_rules import AlertThresholds
from kernel.conf import setting


def setting_name(field: str) -> str:
    return "GPUPORTAL_ALERT_" + field.upper()


def alert_thresholds() -> AlertThresholds:
    """The thresholds in force; a bad one is an ImproperlyConfigured naming its setting."""
    values = {field.name: setting(setting_name(field.name)) for field in fields(AlertThresholds)}
    thresholds = AlertThresholds(**{name: value for name, value in values.items() if value is not None})
    problems = thresholds.problems()
    if problems:
        named = [setting_name(problem.split(":", 1)[0]) + ":" + problem.split(":", 1)[1] for problem in problems]
        raise ImproperlyConfigured("; ".join(named))
    return thresholds
