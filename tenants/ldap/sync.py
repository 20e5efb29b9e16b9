"""The directory sync: every account linked to this directory is looked up by its DN.

- gone from the directory, or matched by ``GPUPORTAL_LDAP_DISABLED_FILTER``: deactivated
  (``tenants.identity.account_deactivate``: sessions ended, tokens revoked, audited);
- still there: its groups are read again and its LDAP roles recomputed.

Everything is read first and applied after, so a directory that fails part-way changes nothing.
Never a mass deactivation by mistake: when the directory cannot be reached or bound, when its user
search finds nobody at all, or when more accounts would go than the safety threshold allows
(``GPUPORTAL_LDAP_SYNC_MAX_DEACTIVATIONS`` or ``GPUPORTAL_LDAP_SYNC_MAX_DEACTIVATION_PERCENT`` of the
linked accounts, whichever is larger), nobody is deactivated; the last case is audited
(``ldap.sync_halted``) and ``manage.py ldap_sync --force`` applies it after an operator checked.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from audit import actions
from audit.models import Outcome
from audit.services import audit_record
from tenants.identity import account_deactivate
from tenants.ldap.accounts import SOURCE, ldap_roles_apply
from tenants.ldap.conf import LdapConfig, ldap_config
from tenants.ldap.directory import LDAPError, entry_groups, entry_read, service_connect, users_exist
from tenants.models import ExternalIdentity

log = logging.getLogger(__name__)

OK, UNREACHABLE, EMPTY, HALTED = "ok", "unreachable", "empty", "halted"


@dataclass
class SyncReport:
    outcome: str = OK
    checked: int = 0
    deactivated: list[str] = field(default_factory=list)
    to_deactivate: list[str] = field(default_factory=list)
    roles_changed: int = 0
    error: str = ""

    @property
    def failed(self) -> bool:
        return self.outcome != OK

    def as_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome, "checked": self.checked, "deactivated": self.deactivated,
            "to_deactivate": self.to_deactivate, "roles_changed": self.roles_changed, "error": self.error,
        }  # fmt: skip


@dataclass(frozen=True)
class _Verdict:
    identity: ExternalIdentity
    reason: str | None  # why to deactivate; None: present
    groups: set[str]


def _read(config: LdapConfig, identities: list[ExternalIdentity]) -> list[_Verdict]:
    """What the directory says of each account; raises ``LDAPError`` on any directory failure."""
    connection = service_connect(config)
    try:
        if identities and not users_exist(config, connection):
            raise _Empty
        verdicts = []
        for identity in identities:
            attrs = entry_read(connection, identity.subject)
            if attrs is None:
                verdicts.append(_Verdict(identity, "gone from the LDAP directory", set()))
            elif config.disabled_filter and entry_read(connection, identity.subject, config.disabled_filter) is not None:
                verdicts.append(_Verdict(identity, "disabled in the LDAP directory", set()))
            else:
                groups = entry_groups(config, dn=identity.subject, attrs=attrs, connection=connection)
                verdicts.append(_Verdict(identity, None, groups))
        return verdicts
    finally:
        connection.unbind_s()


class _Empty(Exception):
    pass


def deactivation_limit(config: LdapConfig, linked: int) -> int:
    """How many accounts one run may deactivate."""
    return max(config.sync_max_deactivations, math.floor(linked * config.sync_max_deactivation_percent / 100))


def ldap_directory_sync(*, force: bool = False, dry_run: bool = False) -> SyncReport:
    """One sync of the linked, active accounts (see the module); ``force`` ignores the threshold,
    ``dry_run`` reports without changing anything."""
    config = ldap_config()
    identities = list(
        ExternalIdentity.objects.filter(source=SOURCE, issuer=config.issuer, user__is_active=True)
        .select_related("user").order_by("pk")
    )  # fmt: skip
    report = SyncReport(checked=len(identities))
    try:
        verdicts = _read(config, identities)
    except _Empty:
        report.outcome = EMPTY
        report.error = f"the user search under {config.user_search_base!r} found nobody"
        log.error("LDAP sync: %s; %d linked accounts kept, nobody deactivated", report.error, len(identities))
        return report
    except LDAPError as exc:
        report.outcome = UNREACHABLE
        report.error = f"{type(exc).__name__}: {exc}"
        log.error("LDAP sync: the directory %s failed (%s); nobody deactivated", config.server_uri, report.error)
        return report
    going = [verdict for verdict in verdicts if verdict.reason is not None]
    report.to_deactivate = [verdict.identity.user.username for verdict in going]
    limit = deactivation_limit(config, len(identities))
    if len(going) > limit and not force:
        report.outcome = HALTED
        report.error = f"{len(going)} of {len(identities)} linked accounts would be deactivated, more than {limit}"
        log.error("LDAP sync halted: %s; nobody deactivated (manage.py ldap_sync --force applies it)", report.error)
        if not dry_run:
            _halt_record(config, report, limit)
        return report
    if dry_run:
        return report
    for verdict in verdicts:
        user = verdict.identity.user
        if verdict.reason is not None:
            account_deactivate(actor=None, user=user, reason=verdict.reason)
            report.deactivated.append(user.username)
        else:
            report.roles_changed += len(ldap_roles_apply(user=user, identity=verdict.identity, groups=verdict.groups,
                                                         login=False))
    log.info(
        "LDAP sync: %d linked accounts checked, %d deactivated, %d role changes",
        report.checked, len(report.deactivated), report.roles_changed,
    )  # fmt: skip
    return report


@transaction.atomic
def _halt_record(config: LdapConfig, report: SyncReport, limit: int) -> None:
    audit_record(
        actor=None, action=actions.LDAP_SYNC_HALTED, outcome=Outcome.DENIED,
        details={
            "issuer": config.issuer, "linked_count": report.checked, "would_deactivate_count": len(report.to_deactivate),
            "limit": limit, "usernames": report.to_deactivate[:50],
        },
    )  # fmt: skip
