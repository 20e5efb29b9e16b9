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
# OIDC providers come and go per test (override_settings), and DRF reads its authentication classes
# once: the provider's bearer class is always there (it stands aside while OIDC is off).
_api_authentication = REST_FRAMEWORK["DEFAULT_AUTHENTICATION_CLASSES"]  # noqa: F405
assert isinstance(_api_authentication, list)
if "tenants.oidc.drf.OidcBearerAuthentication" not in _api_authentication:
    _api_authentication.insert(1, "tenants.oidc.drf.OidcBearerAuthentication")
# A host webhooks may be created for (nothing listens there: the tests of sending run their own receiver).
GPUPORTAL_WEBHOOK_ALLOWED_HOSTS = ["hooks.example.org"]
