"""Thin tasks of the tenants app."""

from __future__ import annotations

from typing import Any

from celery import shared_task


class DirectorySyncFailed(RuntimeError):
    """The sync could not run as it should (directory unreachable, empty, or past the threshold):
    nobody was deactivated. Raised so that the task counts as failed (``gpuportal_celery_tasks``)."""


@shared_task
def ldap_sync_task() -> dict[str, Any]:
    """The periodic directory sync (beat's ``tenants-ldap-sync`` when LDAP is configured; the
    embedded clock every ``GPUPORTAL_LDAP_SYNC_EVERY`` seconds). The next run is the retry."""
    from tenants.ldap.conf import ldap_configured

    if not ldap_configured():
        return {"outcome": "not configured"}
    from tenants.ldap.sync import ldap_directory_sync

    report = ldap_directory_sync()
    if report.failed:
        raise DirectorySyncFailed(f"LDAP sync {report.outcome}: {report.error}")
    return report.as_dict()
