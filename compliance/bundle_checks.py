"""The portal's "Verify a bundle": the offline verifier's two answers for an uploaded export bundle.

It runs the same code as ``python -m audit.verify BUNDLE --key ... --checkpoints FOLDER`` with the
portal's trusted keys and its external checkpoint folder (with the proof files): the first answer
is whether the bundle is genuine (what it proves, as of its own checkpoint), the second whether it
is complete as of now (against the folder's latest checkpoint, with the consistency proof from
the bundle's tree to it). A genuine bundle older than the latest checkpoint is therefore shown as
genuine and, separately, as not complete as of now; it is never shown as a failure, and never as
current.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from audit.conf import audit_checkpoint_folder, audit_trusted_keys
from audit.integrity.errors import VerificationFailure
from audit.integrity.store import checkpoint_chain_verify
from audit.integrity.verifier import BundleVerifier


@dataclass(frozen=True)
class BundleVerdict:
    """``genuine``: the bundle verified; ``current``: complete as of the folder's latest checkpoint
    (None when it is not genuine, or the folder holds no checkpoint); ``summary``: what the offline
    verifier prints; ``exit_code``: the status it exits with (0, 1 or 3)."""

    genuine: bool
    current: bool | None
    summary: str

    @property
    def exit_code(self) -> int:
        if not self.genuine:
            return 1
        return 3 if self.current is False else 0


def audit_bundle_verify(*, lines: Iterable[bytes]) -> BundleVerdict:
    """Verify an export bundle (its lines, as uploaded) against this portal's keys and checkpoint
    folder. Raises ``ImproperlyConfigured`` when the portal has no signing key."""
    keys = audit_trusted_keys()
    folder = audit_checkpoint_folder()
    try:
        store = checkpoint_chain_verify(folder.notes(), keys, proofs=folder.proof) if folder.numbers() else None
        report = BundleVerifier(keys, store=store).verify(lines)
    except VerificationFailure as failure:
        where = f"seq {failure.seq}" if failure.seq is not None else "bundle"
        return BundleVerdict(genuine=False, current=None, summary=f"FAILED {where} [{failure.kind}]: {failure.message}")
    return BundleVerdict(genuine=True, current=report.current, summary=report.summary())
