from __future__ import annotations

from django.apps import AppConfig


class WhatIfsConfig(AppConfig):
    name = "whatifs"
    label = "whatifs"
    verbose_name = "What-ifs (the policy twin for admins)"
    default_auto_field = "django.db.models.BigAutoField"
