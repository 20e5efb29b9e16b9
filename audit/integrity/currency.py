"""The second answer of a bundle verification: is the bundle complete as of now?

A genuine bundle proves the log as of its own checkpoint. Whether that is still the whole story is
a separate question, answered against the newest checkpoint the verifier knows (the external
folder's latest): when that one covers more events, the bundle is genuine but not complete as of
now, and the answer says so (and the verifier exits with its own status), so an old bundle can
never be passed off as current. The newer tree must then extend the bundle's: the consistency
proof is the folder's proof files from the bundle's checkpoint to the latest, applied to the
compact range the bundle's own events rebuilt. A tree that does not extend it is a rewritten log,
and fails the verification.
"""

from __future__ import annotations

from dataclasses import dataclass

from audit.integrity.checkpoint import Checkpoint
from audit.integrity.errors import VerificationFailure
from audit.integrity.merkle import CompactRange
from audit.integrity.store import ChainSummary


@dataclass(frozen=True)
class Currency:
    """``current``: True when the bundle covers every event of the newest checkpoint known, False
    when a newer one covers more, None when no newer checkpoint could be known (no folder)."""

    current: bool | None
    line: str
    latest: Checkpoint | None = None


def currency_check(store: ChainSummary | None, checkpoint: Checkpoint, compact: CompactRange) -> Currency:
    """The bundle's checkpoint (``compact``: the tree its events rebuilt, already checked against
    the signed root) against the newest checkpoint of ``store``."""
    if store is None or store.latest is None:
        return Currency(
            None,
            "AS OF NOW: unknown: no external checkpoint folder was given, so this bundle is proven only as of its "
            f"{checkpoint.describe()}; verify it with --checkpoints to know whether newer events exist",
        )
    latest = store.latest
    if latest.size <= checkpoint.size:
        if latest.number > checkpoint.number:
            detail = f"the folder's latest {latest.describe()} covers the same {latest.size} events"
        elif latest.number < checkpoint.number:
            detail = f"the folder's latest is the older {latest.describe()}: the folder copy is behind the bundle"
        else:
            detail = f"its checkpoint is the folder's latest (#{latest.number})"
        return Currency(True, f"AS OF NOW: complete: {detail}", latest)
    added = latest.size - checkpoint.size
    return Currency(
        False,
        f"AS OF NOW: NOT complete: the folder's latest {latest.describe()} covers {added} event"
        f"{'' if added == 1 else 's'} after this bundle's {checkpoint.describe()} ("
        + (f"seq {latest.size} is" if added == 1 else f"seqs {checkpoint.size + 1}..{latest.size} are")
        + f" not in it); {_consistency(store, checkpoint, compact)}",
        latest,
    )


def _consistency(store: ChainSummary, checkpoint: Checkpoint, compact: CompactRange) -> str:
    """Apply the folder's consistency proofs from the bundle's checkpoint to the latest to the
    bundle's own tree; raises ``rewritten`` when one does not extend it."""
    latest = store.latest
    assert latest is not None
    known = store.roots_by_size.get(checkpoint.size)
    if known is None or known[0] != checkpoint.root:
        return (
            f"the folder holds no checkpoint of {checkpoint.size} events, so no consistency proof links this bundle "
            "to its latest"
        )
    first = known[1]
    if store.proofs is None:
        return (
            f"the folder's signed chain links #{first} to #{latest.number} (no proof files given, so no consistency "
            "proof was checked)"
        )
    tree = CompactRange.from_frontier(compact.size, list(compact.frontier))
    for number in range(first + 1, latest.number + 1):
        proof = store.proofs(number)
        if proof is None:
            return (
                f"the folder's signed chain links #{first} to #{latest.number}; checkpoint #{number} has no proof file, "
                f"so the consistency proof was checked only up to #{number - 1}"
            )
        if not proof.extends(tree):
            raise VerificationFailure(
                "rewritten",
                f"the folder's checkpoint #{number} does not extend the tree of this bundle's {checkpoint.describe()}: "
                "its consistency proof fails, so the log was rewritten after the bundle's checkpoint",
                seq=checkpoint.size + 1,
            )
        tree = proof.compact()
    if tree.root() != latest.root:
        raise VerificationFailure(
            "rewritten", f"the consistency proofs do not reach the root of the folder's latest {latest.describe()}"
        )
    return (
        f"its tree extends this bundle's: the consistency proof from #{first} ({checkpoint.size} events) to "
        f"#{latest.number} ({latest.size} events) was checked"
    )
