"""The one clock every service, task and selector reads for "now".

In production it is the system clock (``django.utils.timezone.now``). Tests and the simulator
(``tests/simulation``) set it: :func:`clock_set` freezes it at an instant, :func:`clock_advance`
moves a frozen clock forward (or shifts a running one), :func:`clock_reset` gives the system
clock back, and :func:`clock_at` freezes it for a block and then gives back whatever it was (the
demo seed plays its past through it). The setting is process-wide, not per thread, on purpose: the simulator's concurrent
actors act in one virtual second on several threads, and all of them must read the same time.

Nothing outside this module calls ``timezone.now()``, ``datetime.now()`` or ``date.today()``
(``tests/architecture/test_clock.py`` enforces it). Django's ``auto_now`` / ``auto_now_add``
fields still stamp rows with the system clock: they record when a row was written, never a
moment a rule depends on.
"""

from __future__ import annotations

import datetime
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from django.utils import timezone

_LOCK = threading.Lock()
_frozen: datetime.datetime | None = None
_offset = datetime.timedelta(0)


def clock_now() -> datetime.datetime:
    """The current instant, timezone-aware (UTC)."""
    frozen = _frozen
    if frozen is not None:
        return frozen
    offset = _offset
    return timezone.now() + offset if offset else timezone.now()


def clock_set(at: datetime.datetime) -> None:
    """Freeze the clock at ``at`` (timezone-aware) until it is moved or reset."""
    if timezone.is_naive(at):
        raise ValueError("clock_set needs a timezone-aware datetime")
    global _frozen
    with _LOCK:
        _frozen = at


def clock_advance(delta: datetime.timedelta) -> datetime.datetime:
    """Move the clock forward by ``delta``: a frozen clock stays frozen at the later instant, a
    running one runs on shifted. Returns the new "now"."""
    if delta < datetime.timedelta(0):
        raise ValueError("the clock only moves forward")
    global _frozen, _offset
    with _LOCK:
        if _frozen is not None:
            _frozen = _frozen + delta
        else:
            _offset = _offset + delta
    return clock_now()


def clock_reset() -> None:
    """Back to the system clock."""
    global _frozen, _offset
    with _LOCK:
        _frozen = None
        _offset = datetime.timedelta(0)


@contextmanager
def clock_at(at: datetime.datetime) -> Iterator[datetime.datetime]:
    """Freeze the clock at ``at`` (timezone-aware) for the block, then give back the clock as it
    was: frozen where it was frozen, shifted as it was shifted, or the system's."""
    if timezone.is_naive(at):
        raise ValueError("clock_at needs a timezone-aware datetime")
    global _frozen, _offset
    with _LOCK:
        before = (_frozen, _offset)
        _frozen = at
    try:
        yield at
    finally:
        with _LOCK:
            _frozen, _offset = before
