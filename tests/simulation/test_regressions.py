"""Defects the simulator found, pinned as the shrunk sequences that replayed them: each replay runs
from a fresh world with every invariant, and must not break any. A sequence names action indices
of its seed's stream (``actions.actions_generate``): a change to how actions are drawn orphans
them, and they are then shrunk again from the seed that found the defect (docs/simulation.md)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tests.conftest import requires_postgres
from tests.simulation.faults import faults_installed
from tests.simulation.report import failure_text
from tests.simulation.runner import run_seed
from tests.simulation.shrink import PROBED

POSTGRES: pytest.MarkDecorator = requires_postgres()


@dataclass(frozen=True)
class Replay:
    what: str
    seed: int
    steps: int
    only: tuple[int, ...]
    invariant: str  # what it broke

    def __str__(self) -> str:
        return f"seed{self.seed}-{self.invariant}"


REPLAYS = (
    Replay("a window cancelled while in force ends there: the next tick applies that end (the cancel's time is the "
           "clock's, not the system's)", 1, 202, (49, 161, 178, 180, 187, 192, 196, 201), "window-edge"),
    Replay("a reclaim for capacity takes as oversubscribed only grants beyond a limit at some instant, not by "
           "adding up grants that never hold together over a long request", 6, 96,
           (51, 60, 61, 62, 77, 78, 79, 80, 81, 82, 83, 87, 90, 92, 93, 95), "reclaim-reason"),
    Replay("a grant taken for another department gives back no unit within its own department's guarantee (a part "
           "would do)", 14, 92, (29, 33, 34, 35, 39, 41, 43, 44, 49, 50, 53, 77, 89, 91), "reclaim-within-guarantee"),
    Replay("no units are added to a grant whose end has come while its expiry has not run (the tick was late): "
           "placed over an empty interval they were put on its own GPUs", 5, 66, (44, 54, 56, 59, 65), "capacity"),
    Replay("the simulator's own: a deadlock on a defragmentation runs a tick instead, so the window edges that tick "
           "applies are read back before they are checked", 60, 241, (167, 238, 240), "window-edge"),
)


@POSTGRES
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("replay", REPLAYS, ids=str)
def test_a_sequence_that_once_broke_an_invariant_keeps_every_one(replay: Replay) -> None:
    with faults_installed() as faults:
        result = run_seed(replay.seed, replay.steps, keep=replay.only, faults=faults,
                          probe_every=1 if replay.invariant in PROBED else 0, verify_audit=False)
    assert result.failure is None, f"{replay.what}\n" + failure_text(result.failure, replay.steps, None)
