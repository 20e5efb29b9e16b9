"""Test settings until the telemetry app is registered in gpuportal.settings (then removed)."""

from __future__ import annotations

from gpuportal.settings_test import *  # noqa: F403
from gpuportal.settings_test import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "clusters.telemetry"]
ROOT_URLCONF = "tests.telemetry.urls"
