"""``manage.py audit_checkpoint``: publish a checkpoint now (what the beat task does every minute)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from audit.checkpoints import AuditIntegrityError, checkpoint_backfill, checkpoint_publish


class Command(BaseCommand):
    help = "Sign and publish a checkpoint of the audit log, to the database and the external folder."

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            backfilled = checkpoint_backfill()
            checkpoint = checkpoint_publish()
        except AuditIntegrityError as error:
            failure = error.failure
            where = f"seq {failure.seq}" if failure.seq is not None else "log"
            raise CommandError(f"REFUSED {where} [{failure.kind}]: {failure.message}", returncode=1) from None
        if backfilled:
            self.stdout.write(f"wrote {backfilled} missing checkpoints to the external folder")
        self.stdout.write(f"checkpoint #{checkpoint.number}: {checkpoint.size} events, root {checkpoint.root}")
