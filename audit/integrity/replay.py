"""Replaying the whole log in order: the state a checkpoint is computed from.

Checkpoint publishing resumes from the previous checkpoint's state and replays only the new
events; live verification replays everything from genesis. Both check every link on the way.
"""

from __future__ import annotations

from audit.integrity.canonical import GENESIS_HASH, EventFacts
from audit.integrity.chain import link_check, record_parse_or_fail, sequence_failure
from audit.integrity.checkpoint import ZERO_HASH
from audit.integrity.departments import DepartmentHead, departments_root
from audit.integrity.errors import VerificationFailure
from audit.integrity.merkle import CompactRange, NodeSink
from audit.integrity.quarantine import QUARANTINE_ACTION


class ReplayState:
    def __init__(self, *, compact: CompactRange, last: EventFacts | None, heads: dict[int, DepartmentHead]) -> None:
        self.compact = compact
        self.last = last
        self.before_last: EventFacts | None = None
        self.heads = heads
        self.heads_changed = False
        self.quarantines = 0  # audit.quarantined events so far, and the hash of the latest
        self.quarantine_head = ZERO_HASH

    @classmethod
    def empty(cls) -> ReplayState:
        return cls(compact=CompactRange(), last=None, heads={})

    @property
    def size(self) -> int:
        return self.compact.size

    @property
    def head(self) -> bytes:
        return self.last.hash if self.last is not None else ZERO_HASH

    def departments_root(self) -> bytes:
        return departments_root(self.heads)

    def append(self, data: bytes, *, sink: NodeSink | None = None, deleted: str = "deleted from the log") -> EventFacts:
        expected = self.size + 1
        event = record_parse_or_fail(data, expected_seq=expected)
        if event.seq != expected:
            raise sequence_failure(event=event, expected=expected, last=self.last, next_seq=None, deleted=deleted)
        link_check(event=event, previous=self.last, before_previous=self.before_last)
        if event.department_id is not None:
            self._department_step(event)
        if event.action == QUARANTINE_ACTION:
            self.quarantines += 1
            self.quarantine_head = event.hash
        self.compact.append_leaf(event.hash, sink)
        self.before_last, self.last = self.last, event
        return event

    def _department_step(self, event: EventFacts) -> None:
        assert event.department_id is not None and event.department_seq is not None
        head = self.heads.get(event.department_id)
        expected = head.size + 1 if head is not None else 1
        expected_prev = head.hash if head is not None else GENESIS_HASH
        if event.department_seq != expected:
            raise VerificationFailure(
                "altered",
                f"seq {event.seq} claims department_seq {event.department_seq} but department "
                f"{event.department_id} is at {expected - 1}",
                seq=event.seq,
            )
        if event.department_prev_hash != expected_prev:
            raise VerificationFailure(
                "altered",
                f"the department_prev_hash of seq {event.seq} does not match department {event.department_id}'s "
                "previous event",
                seq=event.seq,
            )
        self.heads[event.department_id] = DepartmentHead(
            department_id=event.department_id, size=expected, hash=event.hash_hex
        )
        self.heads_changed = True

