"""The audit log verified as the offline verifier replays it (``audit.integrity``): every event's
record, its link to the one before (the chain and the department chains), and the columns stored
next to it. Incremental within a process: the log is append-only and never flushed, so each run
replays only the events written since the last verification (the first one replays from genesis).
Checkpoints are the auditors' side (``audit.verification``) and need their keys; not checked here."""

from __future__ import annotations

from typing import Any

from django.db import connection

from audit.integrity.replay import ReplayState
from audit.verification import CHUNK, COLUMNS, _columns_check

_state: list[ReplayState] = []


def audit_chain_verify() -> int:
    """Replay the events not verified yet; raise ``VerificationFailure`` naming the first defect.
    Returns how many events the log holds."""
    state = _state[0] if _state else ReplayState.empty()
    while True:
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT {', '.join(COLUMNS)} FROM audit_event WHERE seq > %s ORDER BY seq LIMIT %s",  # noqa: S608
                [state.size, CHUNK],
            )
            rows = cursor.fetchall()
        if not rows:
            break
        for values in rows:
            row: dict[str, Any] = dict(zip(COLUMNS, values, strict=True))
            event = state.append(str(row["record"]).encode("ascii", "replace"))
            _columns_check(row, event.hash_hex)
    _state[:] = [state]
    return state.size
