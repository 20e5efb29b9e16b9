"""How two neighbouring events must relate, and what to call it when they do not.

Shared by the full replay (checkpoint publishing, live verification) and the bundle verifier so
that the same defect gets the same name everywhere.
"""

from __future__ import annotations

import re

from audit.integrity.canonical import GENESIS_HASH, EventFacts, parse_record
from audit.integrity.errors import VerificationFailure

_SEQ_IN_TEXT = re.compile(rb'"seq":(\d+)')


def record_parse_or_fail(data: bytes, *, expected_seq: int) -> EventFacts:
    try:
        return parse_record(data)
    except ValueError as error:
        found = _SEQ_IN_TEXT.search(data)
        seq = int(found.group(1)) if found else expected_seq
        raise VerificationFailure("malformed", f"event record is unreadable: {error}", seq=seq) from None


def link_check(*, event: EventFacts, previous: EventFacts | None, before_previous: EventFacts | None) -> None:
    """``previous`` is the event at ``event.seq - 1`` (None for seq 1); ``before_previous`` the one
    before it when known. Raises for a broken hash link or time running backwards."""
    if previous is None:
        if event.seq == 1 and event.prev_hash != GENESIS_HASH:
            raise VerificationFailure(
                "altered", "the first event does not start from the genesis hash", seq=event.seq
            )
        return
    if event.prev_hash != previous.hash_hex:
        if before_previous is not None and event.prev_hash == before_previous.hash_hex:
            raise VerificationFailure(
                "injected",
                f"seq {previous.seq} is not part of the chain: seq {event.seq} links to seq {before_previous.seq}; "
                "an event was injected",
                seq=previous.seq,
            )
        raise VerificationFailure(
            "altered",
            f"seq {previous.seq} was altered: its hash does not match the prev_hash recorded by seq {event.seq}",
            seq=previous.seq,
        )
    if event.occurred_at < previous.occurred_at:
        raise VerificationFailure(
            "time-order",
            f"seq {event.seq} is dated {event.occurred_at}, before seq {previous.seq} ({previous.occurred_at})",
            seq=event.seq,
        )


def sequence_failure(
    *, event: EventFacts, expected: int, last: EventFacts | None, next_seq: int | None, deleted: str
) -> VerificationFailure:
    """Name the defect when ``event.seq`` is not the ``expected`` next number. ``next_seq`` is the
    sequence number of the event after this one, if any (to tell a swap from a deletion)."""
    if last is not None and event.seq == last.seq:
        if event.hash == last.hash:
            return VerificationFailure("duplicated", f"seq {event.seq} appears twice", seq=event.seq)
        return VerificationFailure(
            "injected", f"seq {event.seq} appears twice with different content: an event was injected", seq=event.seq
        )
    if event.seq < expected:
        after = f"after seq {last.seq}" if last is not None else "at the start"
        return VerificationFailure(
            "reordered", f"seq {event.seq} appears {after}: events are out of order or repeated", seq=event.seq
        )
    if next_seq is not None and expected <= next_seq < event.seq:
        return VerificationFailure(
            "reordered", f"seq {expected} appears after seq {event.seq}: events are out of order", seq=expected
        )
    if event.seq == expected + 1:
        return VerificationFailure("missing", f"seq {expected} is missing: {deleted}", seq=expected)
    return VerificationFailure(
        "missing", f"seqs {expected}..{event.seq - 1} are missing: {deleted}", seq=expected
    )


def department_link_check(*, event: EventFacts, previous: EventFacts | None) -> None:
    """``previous`` is the department's event with ``department_seq - 1``, None for the first."""
    if previous is None:
        if event.department_seq == 1 and event.department_prev_hash != GENESIS_HASH:
            raise VerificationFailure(
                "altered", f"department {event.department_id}'s first event does not start from the genesis hash",
                seq=event.seq,
            )
        return
    if event.department_prev_hash != previous.hash_hex:
        raise VerificationFailure(
            "altered",
            f"seq {previous.seq} was altered: its hash does not match the department_prev_hash recorded by "
            f"seq {event.seq} (department {event.department_id})",
            seq=previous.seq,
        )
