"""Telemetry tests run only where the app is installed: until ``clusters.telemetry`` is in
INSTALLED_APPS, run them with ``DJANGO_SETTINGS_MODULE=tests.telemetry.settings``."""

from __future__ import annotations

from django.conf import settings

if "clusters.telemetry" in settings.INSTALLED_APPS:
    from tests.telemetry.fixtures import agent, issue_token  # noqa: F401 (fixtures)
else:
    collect_ignore_glob = ["test_*.py"]
