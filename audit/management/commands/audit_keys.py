"""``manage.py audit_keys``: make a signing key, or show the verifier key of the configured one."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from django.core.management.base import BaseCommand, CommandError, CommandParser

from audit.conf import audit_origin, audit_signing_key
from audit.integrity.keys import signing_key_generate


class Command(BaseCommand):
    help = (
        "Without options: print the verifier key (for auditors) of the configured signing key. "
        "With --generate FILE: write a new Ed25519 signing key there (mode 600) and print its verifier key."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--generate", type=Path, metavar="FILE", help="write a new private key to FILE")

    def handle(self, *args: Any, **options: Any) -> None:
        path: Path | None = options["generate"]
        if path is not None:
            key = signing_key_generate(audit_origin())
            try:
                descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                raise CommandError(f"{path} exists; refusing to overwrite a key") from None
            with os.fdopen(descriptor, "w") as handle:
                handle.write(key.private_pem())
        else:
            key = audit_signing_key()
        public_pem = key.private_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ).decode("ascii")
        self.stdout.write(key.verifier.vkey())
        self.stdout.write(public_pem.rstrip())
