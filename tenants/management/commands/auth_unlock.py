"""``manage.py auth_unlock USERNAME`` or ``manage.py auth_unlock --address ADDRESS``: lift a sign-in lock."""

from __future__ import annotations

import ipaddress
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from tenants.signin_lockout import signin_lock_lift


class Command(BaseCommand):
    help = (
        "Lift the sign-in lock on a username or on a client address (and forget its failed attempts); "
        "audited as auth.unlocked. Operators only: this command is not limited by any portal role."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username", nargs="?", help="the username as typed at sign-in (case does not matter)")
        parser.add_argument("--address", help="a client address (an IPv6 address lifts its /64)")
        parser.add_argument("--actor", help="your portal username, recorded as the actor of the audit event")

    def handle(self, *args: Any, **options: Any) -> None:
        username, address = options["username"], options["address"]
        if (username is None) == (address is None):
            raise CommandError("give either a USERNAME or --address ADDRESS")
        if username is not None and not username.strip():
            raise CommandError("the username is empty")
        if address is not None:
            try:
                ipaddress.ip_address(address)
            except ValueError:
                raise CommandError(f"--address {address!r} is not an IP address") from None
        actor = None
        if options["actor"]:
            actor = get_user_model().objects.filter(username=options["actor"]).first()
            if actor is None:
                raise CommandError(f"no user named {options['actor']!r}")
        was_locked = signin_lock_lift(actor=actor, username=username, address=address, via="manage.py auth_unlock")
        subject = f"address {address}" if address is not None else f"username {username!r}"
        self.stdout.write(f"{subject}: {'lock lifted' if was_locked else 'was not locked; failed attempts forgotten'}")
