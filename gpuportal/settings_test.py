"""Settings for the test suite: the production settings plus fast hashing and in-process tasks."""

from __future__ import annotations

import os

os.environ.setdefault("GPUPORTAL_SECRET_KEY", "test-only-secret-key-that-is-long-enough-0123456789")

from gpuportal.settings import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# Tests drive tasks in-process; the tests of the worker itself start a real one against Redis.
CELERY_TASK_ALWAYS_EAGER = True
SESSION_COOKIE_SECURE = False
CSRF_COOKIE_SECURE = False
# A host webhooks may be created for (nothing listens there: the tests of sending run their own receiver).
GPUPORTAL_WEBHOOK_ALLOWED_HOSTS = ["hooks.example.org"]
