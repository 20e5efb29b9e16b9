"""The lines before a bundle's events: the header with its signed checkpoint, that checkpoint
against the external store, and (for a department bundle) the departments proof."""

from __future__ import annotations

import json
from collections.abc import Iterable

from audit.integrity.bundle import BUNDLE_VERSION, Scope
from audit.integrity.canonical import leaf_hash
from audit.integrity.checkpoint import Checkpoint, checkpoint_verify, note_hash
from audit.integrity.departments import DepartmentHead
from audit.integrity.errors import VerificationFailure
from audit.integrity.keys import VerifierKey
from audit.integrity.lines import BundleLines
from audit.integrity.merkle import CompactRange
from audit.integrity.store import ChainSummary


def header_read(lines: BundleLines, keys: Iterable[VerifierKey]) -> tuple[Checkpoint, Scope, str]:
    """The header line: the bundle's checkpoint, verified against *keys*, its scope and its note."""
    try:
        header = json.loads(next(lines))
    except (StopIteration, json.JSONDecodeError):
        raise VerificationFailure("malformed", "the bundle does not start with a header line") from None
    if not isinstance(header, dict) or header.get("@") != "bundle" or header.get("version") != BUNDLE_VERSION:
        raise VerificationFailure("malformed", "the first line is not a version 1 bundle header")
    note = header.get("checkpoint")
    if not isinstance(note, str):
        raise VerificationFailure("malformed", "the bundle header has no checkpoint")
    try:
        scope = Scope.from_json(header.get("scope"))
    except ValueError as error:
        raise VerificationFailure("malformed", f"the bundle scope is malformed: {error}") from None
    return checkpoint_verify(note, keys), scope, note


def store_check(store: ChainSummary | None, checkpoint: Checkpoint, note: str) -> VerificationFailure | None:
    """The bundle's checkpoint against the external store's chain: no split view, no rollback. A
    split view (a checkpoint of the store's number or size with other contents) is returned rather
    than raised, for the walk to say first where the bundle's events part from the store's
    checkpoints; a rollback is raised. A checkpoint older than the store's latest is no defect: the
    bundle is genuine as of it, and ``audit.integrity.currency`` answers separately that it is not
    complete as of now."""
    if store is None or store.latest is None:
        return None
    known = store.notes_by_number.get(checkpoint.number)
    if known is not None and known != note_hash(note):
        return VerificationFailure(
            "split-view", f"the bundle's checkpoint #{checkpoint.number} differs from the store's #{checkpoint.number}"
        )
    same_size = store.roots_by_size.get(checkpoint.size)
    if same_size is not None and same_size[0] != checkpoint.root:
        return VerificationFailure(
            "split-view",
            f"the bundle's {checkpoint.describe()} and the store's checkpoint #{same_size[1]} both cover "
            f"{checkpoint.size} events but have different roots",
        )
    latest = store.latest
    if checkpoint.number > latest.number and checkpoint.size < latest.size:
        raise VerificationFailure(
            "rollback",
            f"the bundle's {checkpoint.describe()} covers fewer events than the store's {latest.describe()}",
        )
    return None


def departments_read(lines: BundleLines, checkpoint: Checkpoint, wanted: tuple[int, ...]) -> dict[int, DepartmentHead]:
    """The departments proof line: the heads of the *wanted* departments, each revealed or proven absent."""
    try:
        meta = json.loads(next(lines))
    except (StopIteration, json.JSONDecodeError):
        meta = None
    if not isinstance(meta, dict) or meta.get("@") != "departments" or not isinstance(meta.get("items"), list):
        raise VerificationFailure("malformed", "a department bundle needs the departments proof as its second line")
    compact = CompactRange()
    revealed: list[tuple[int, DepartmentHead]] = []
    try:
        for item in meta["items"]:
            if "entry" in item:
                head = DepartmentHead.from_entry(item["entry"])
                revealed.append((compact.size, head))
                compact.append_leaf(leaf_hash(head.entry_bytes()))
            else:
                level, hash_hex = item["node"]
                compact.append_subtree(int(level), bytes.fromhex(hash_hex))
    except (KeyError, TypeError, ValueError) as error:
        raise VerificationFailure("malformed", f"the departments proof is malformed: {error}") from None
    if compact.size != checkpoint.departments_size or compact.root() != checkpoint.departments_root:
        raise VerificationFailure(
            "departments-proof",
            f"the department heads in the bundle do not reproduce {checkpoint.describe()}'s departments root",
        )
    ids = [head.department_id for _, head in revealed]
    if ids != sorted(set(ids)):
        raise VerificationFailure("departments-proof", "the department heads are not in strictly increasing order")
    heads = {head.department_id: head for _, head in revealed}
    for department_id in wanted:
        if department_id not in heads:
            _absence_check(department_id, revealed, compact.size)
    return {department_id: heads[department_id] for department_id in wanted if department_id in heads}


def _absence_check(department_id: int, revealed: list[tuple[int, DepartmentHead]], total: int) -> None:
    positions = dict(revealed)
    if total == 0:
        return
    for position, head in revealed:
        below = head.department_id < department_id
        if below and position == total - 1:
            return
        if not below and position == 0:
            return
        after = positions.get(position + 1)
        if below and after is not None and after.department_id > department_id:
            return
    raise VerificationFailure(
        "incomplete",
        f"department {department_id}'s head is not in the bundle and its absence is not proven",
    )
