"""The Celery application. Without ``CELERY_BROKER_URL`` tasks run eagerly in-process."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuportal.settings")

app = Celery("gpuportal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
