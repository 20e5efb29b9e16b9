"""The roles a membership grants (a module of its own so that every tenants model can name them)."""

from __future__ import annotations

from django.db import models


class Role(models.TextChoices):
    RESEARCHER = "researcher", "Researcher"
    DEPARTMENT_ADMIN = "department_admin", "Department admin"
    PLATFORM_ADMIN = "platform_admin", "Platform admin"
    AUDITOR = "auditor", "Auditor"
