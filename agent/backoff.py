"""Capped exponential backoff with jitter, for retrying the portal."""

from __future__ import annotations

import random
from collections.abc import Callable

_MAX_DOUBLINGS = 40  # 2**40 times any sane initial delay is far beyond any cap


class Backoff:
    """Delays of ``initial * 2**n`` capped at ``maximum``, each drawn from its upper half.

    The jitter keeps a fleet of agents that lost the portal at the same moment from retrying in
    lockstep; drawing from the upper half ("equal jitter") keeps each delay at least half the
    nominal one, so the backoff really backs off.
    """

    def __init__(self, *, initial: float, maximum: float, random_unit: Callable[[], float] = random.random) -> None:
        if initial <= 0 or maximum < initial:
            raise ValueError("backoff needs 0 < initial <= maximum")
        self.initial = initial
        self.maximum = maximum
        self._random_unit = random_unit
        self._failures = 0

    def next_delay(self) -> float:
        nominal = min(self.maximum, self.initial * 2.0 ** min(self._failures, _MAX_DOUBLINGS))
        self._failures += 1
        return nominal / 2 + self._random_unit() * nominal / 2

    def reset(self) -> None:
        self._failures = 0

    @property
    def failures(self) -> int:
        return self._failures
