"""``clock_at`` freezes the portal's clock for a block (the demo seed plays its past through it)
and gives back the clock as it was: frozen, shifted or the system's."""

from __future__ import annotations

import datetime

import pytest

from kernel.clock import clock_advance, clock_at, clock_now, clock_reset, clock_set

AT = datetime.datetime(2026, 12, 1, 9, 30, tzinfo=datetime.UTC)


def test_a_block_runs_at_its_moment_and_a_frozen_clock_stays_where_it_was() -> None:
    clock_set(AT)
    with clock_at(AT - datetime.timedelta(days=7)) as moment:
        assert clock_now() == moment == AT - datetime.timedelta(days=7)
    assert clock_now() == AT
    clock_reset()


def test_a_shifted_clock_is_shifted_again_after_the_block() -> None:
    clock_reset()
    clock_advance(datetime.timedelta(days=30))
    with clock_at(AT):
        assert clock_now() == AT
    assert clock_now() - datetime.datetime.now(datetime.UTC) > datetime.timedelta(days=29)
    clock_reset()


def test_a_naive_moment_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        with clock_at(AT.replace(tzinfo=None)):
            pass
