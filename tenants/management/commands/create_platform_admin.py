"""``manage.py create_platform_admin USERNAME``: the first platform admin of a new installation."""

from __future__ import annotations

import getpass
import sys
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from kernel.errors import FieldError
from tenants.bootstrap import platform_admin_bootstrap


class Command(BaseCommand):
    help = (
        "Make USERNAME a platform admin of the organisation (its root department, made when missing), creating the "
        "user when new (staff and superuser, for /admin/ too). Audited as department.created and membership.granted. "
        "The password is asked twice, or read from standard input with --password-stdin. Safe to run again."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--email", default="", help="the user's e-mail address (new users)")
        parser.add_argument("--organisation", default="org", help="slug of the root department (default: org)")
        parser.add_argument("--organisation-name", default="", help="its display name, when it is made")
        parser.add_argument("--password-stdin", action="store_true", help="read the password from standard input")

    def _password(self, options: dict[str, Any]) -> str:
        if options["password_stdin"]:
            return sys.stdin.readline().rstrip("\n")
        if not sys.stdin.isatty():
            raise CommandError("no terminal to ask the password on: pass it on standard input with --password-stdin")
        first = getpass.getpass("Password: ")
        if first != getpass.getpass("Password (again): "):
            raise CommandError("the passwords differ")
        return first

    def handle(self, *args: Any, **options: Any) -> None:
        from django.contrib.auth.models import User

        username: str = options["username"]
        password = "" if User.objects.filter(username=username).exists() else self._password(options)
        try:
            user, changed = platform_admin_bootstrap(
                username=username, email=options["email"], password=password,
                organisation_slug=options["organisation"], organisation_name=options["organisation_name"],
            )
        except ValidationError as error:
            raise CommandError("; ".join(error.messages)) from None
        except FieldError as error:
            raise CommandError(str(error)) from None
        state = "is now" if changed else "already was"
        self.stdout.write(f"{user.get_username()} {state} a platform admin of {options['organisation']}")
