"""``manage.py audit_verify``: check the live log against its checkpoints and the external folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from audit.integrity.errors import VerificationFailure
from audit.integrity.store import CheckpointFolder
from audit.verification import audit_log_verify


class Command(BaseCommand):
    help = "Verify the audit log in the database against the signed checkpoints (exit 1 on any defect)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--checkpoints", type=Path, help="external checkpoint folder (default: the configured one)")

    def handle(self, *args: Any, **options: Any) -> None:
        folder = CheckpointFolder(options["checkpoints"]) if options["checkpoints"] else None
        try:
            report = audit_log_verify(folder=folder)
        except VerificationFailure as failure:
            where = f"seq {failure.seq}" if failure.seq is not None else "log"
            raise CommandError(f"FAILED {where} [{failure.kind}]: {failure.message}", returncode=1) from None
        self.stdout.write(report.summary())
