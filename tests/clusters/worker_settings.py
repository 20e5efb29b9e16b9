"""Settings of the real Celery worker started by the worker tests: the test settings, not eager."""

from __future__ import annotations

from gpuportal.settings_test import *  # noqa: F403

CELERY_TASK_ALWAYS_EAGER = False
