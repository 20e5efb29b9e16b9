"""Verifying an export bundle (``audit.integrity.bundle`` describes the format) in one streaming
pass: signature, every event's place and links, the signed root and head, and the completeness
the scope claims. Raises ``VerificationFailure`` naming the first defect."""

from __future__ import annotations

from collections.abc import Iterable

from audit.integrity.currency import currency_check
from audit.integrity.header import departments_read, header_read, store_check
from audit.integrity.keys import VerifierKey
from audit.integrity.lines import BundleLines
from audit.integrity.report import BundleReport
from audit.integrity.store import ChainSummary
from audit.integrity.walk import EventWalk


class BundleVerifier:
    """Verify a bundle line by line in constant memory (apart from one entry per department).

    ``keys`` are the trusted verifier keys. ``store`` is the checked chain of checkpoints from the
    external store, when the verifier has it: the bundle's checkpoint must then agree with it, and
    the report answers separately whether the bundle is complete as of the store's latest
    checkpoint (``BundleReport.current``), with the consistency proof from the bundle's tree to it.
    """

    def __init__(self, keys: Iterable[VerifierKey], *, store: ChainSummary | None = None):
        self.keys = list(keys)
        self.store = store

    def verify(self, raw_lines: Iterable[bytes]) -> BundleReport:
        lines = BundleLines(raw_lines)
        checkpoint, scope, note = header_read(lines, self.keys)
        conflict = store_check(self.store, checkpoint, note)
        run = EventWalk(checkpoint=checkpoint, scope=scope, lines=lines, store=self.store, conflict=conflict)
        if scope.departments is not None:
            run.heads = departments_read(lines, checkpoint, scope.departments)
        report = run.walk()
        report.currency = currency_check(self.store, checkpoint, run.compact)
        return report
