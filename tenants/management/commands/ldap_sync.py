"""``manage.py ldap_sync``: run the directory sync now (docs/identity.md, "LDAP")."""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser

from tenants.ldap.conf import ldap_configured


class Command(BaseCommand):
    help = (
        "Sync the accounts linked to the LDAP directory: deactivate those gone or disabled there, recompute "
        "the others' LDAP roles. --dry-run reports only; --force applies a run past the safety threshold; "
        "--link USERNAME links an existing local account to its directory entry instead."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="report what would change, change nothing")
        parser.add_argument("--force", action="store_true", help="deactivate even past the safety threshold")
        parser.add_argument("--link", metavar="USERNAME", help="link this local account to the directory entry "
                            "the user search finds for its username (audited ldap.account_linked)")

    def handle(self, *args: Any, **options: Any) -> None:
        if not ldap_configured():
            raise CommandError("LDAP is not configured (GPUPORTAL_LDAP_SERVER_URI is unset)")
        from tenants.ldap.sync import ldap_directory_sync

        if options["link"]:
            self._link(options["link"])
            return
        report = ldap_directory_sync(force=options["force"], dry_run=options["dry_run"])
        self.stdout.write(json.dumps(report.as_dict(), indent=2))
        if report.failed:
            raise CommandError(f"LDAP sync {report.outcome}: {report.error}; nobody was deactivated")

    def _link(self, username: str) -> None:
        from tenants.ldap.accounts import ldap_account_link, ldap_identity_find
        from tenants.ldap.conf import ldap_config
        from tenants.ldap.directory import LDAPError, service_connect, user_search

        user = User.objects.filter(username__iexact=username).first()
        if user is None:
            raise CommandError(f"no user named {username!r}")
        config = ldap_config()
        try:
            connection = service_connect(config)
            found = user_search(config).execute(connection, {"user": user.username})
            connection.unbind_s()
        except LDAPError as exc:
            raise CommandError(f"the directory failed: {exc}") from None
        if len(found) != 1:
            raise CommandError(f"the user search found {len(found)} entries for {user.username!r}, not one")
        dn = found[0][0]
        if ldap_identity_find(issuer=config.issuer, dn=dn) is not None:
            raise CommandError(f"{dn!r} is already linked")
        ldap_account_link(user=user, issuer=config.issuer, dn=dn, actor=None)
        self.stdout.write(f"linked {user.username} to {dn}")
