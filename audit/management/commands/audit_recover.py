"""``manage.py audit_recover``: diagnose a log that checkpoints refuse, and quarantine and re-anchor.

Without options it reports the first event after the latest checkpoint that does not verify, and
what a recovery would move (exit 1 when one is needed, 0 when the log verifies). With
``--quarantine-from SEQ --reason TEXT`` it performs the recovery (``audit.recovery``): run it with
the owner's database connection and the signing key. ``--list`` shows the quarantines so far.
"""

from __future__ import annotations

import getpass
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from audit.checkpoints import AuditIntegrityError
from audit.recovery import RecoveryRefused, quarantine_and_reanchor, quarantines_list, recovery_diagnose
from kernel.times import ISO_SECOND_Z


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


class Command(BaseCommand):
    help = (
        "Diagnose why audit checkpoints are refused; with --quarantine-from SEQ --reason TEXT, move the rows from SEQ "
        "on (none covered by a checkpoint) into quarantine, resume the chain on the last good event, record both "
        "in the log and sign a checkpoint. Run with the database owner's connection."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--quarantine-from", type=int, metavar="SEQ", help="first seq to move into quarantine")
        parser.add_argument("--reason", default="", help="why (recorded in the log); required with --quarantine-from")
        parser.add_argument("--operator", default=None, help="who runs the recovery (default: the OS user)")
        parser.add_argument("--list", action="store_true", help="list the quarantines so far")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            if options["list"]:
                self._list()
            elif options["quarantine_from"] is None:
                diagnosis = recovery_diagnose()
                self.stdout.write(diagnosis.describe())
                if diagnosis.failure is not None:
                    raise CommandError("recovery needed", returncode=1)
            else:
                self._recover(options)
        except RecoveryRefused as refused:
            raise CommandError(f"REFUSED: {refused}", returncode=1) from None
        except AuditIntegrityError as error:
            raise CommandError(f"REFUSED (rolled back): no checkpoint can be signed: {error}", returncode=1) from None

    def _recover(self, options: dict[str, Any]) -> None:
        recovery = quarantine_and_reanchor(
            from_seq=options["quarantine_from"], reason=options["reason"], operator=options["operator"] or _os_user()
        )
        quarantine = recovery.quarantine
        self.stdout.write(
            f"quarantine #{quarantine.id}: moved {quarantine.event_count} rows (first appended as seqs "
            f"{quarantine.from_seq}..{quarantine.to_seq}, digest {quarantine.digest}) into audit_quarantined_event\n"
            f"recorded as seq {recovery.quarantined.seq} (audit.quarantined) and seq {recovery.reanchored.seq} "
            f"(audit.reanchored); the chain resumes on seq {quarantine.from_seq - 1}\n"
            f"checkpoint #{recovery.checkpoint.number}: {recovery.checkpoint.size} events, root {recovery.checkpoint.root}"
        )

    def _list(self) -> None:
        found = quarantines_list()
        if not found:
            self.stdout.write("no quarantines")
        for quarantine in found:
            self.stdout.write(
                f"quarantine #{quarantine.id} at {quarantine.created_at:{ISO_SECOND_Z}} by {quarantine.operator}: "
                f"seqs {quarantine.from_seq}..{quarantine.to_seq} ({quarantine.event_count} rows, digest "
                f"{quarantine.digest}) after checkpoint #{quarantine.checkpoint_number}; "
                f"{quarantine.failure_kind} at seq {quarantine.failure_seq}; reason: {quarantine.reason}"
            )
