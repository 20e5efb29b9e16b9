from __future__ import annotations

from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "tenants"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_login_failed

        from tenants.signin import failure_count

        # Failed password checks made outside tenants.signin.signin_authenticate count towards the lockout too.
        user_login_failed.connect(failure_count, dispatch_uid="gpuportal-signin-failure-count")
