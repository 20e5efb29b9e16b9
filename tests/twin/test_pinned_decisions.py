"""The replay's speed work changes no decision (docs/twin.md, "Speed"): seeded replays, plain and
with every decision written down (``twin.replay.decisions``), hash to the digests the replay gave
before its hot paths were made incremental.

A digest may legitimately change only when a rule changes what the replay decides (the victim
choice, the placement engine's scoring, the generator's distributions, the order of the queue):
then check that the change is the one intended (``tests/twin/fidelity`` still passes) and print
the new digests with ``.venv/bin/python -m tests.twin.test_pinned_decisions``. A change made only
for speed must leave them as they are.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import pytest

from placement import Gpu, Node
from tests.twin.fidelity.case import fidelity_case
from tests.twin.test_shortcuts import RULES_OVER_TIME
from twin.policy import Policy, policy_with_rules
from twin.replay.decisions import Decision, replay_decisions
from twin.replay.engine import Outcome, Replay
from twin.sources.generator import GeneratorSpec, generated_policy, workload_generate
from twin.workload import Job

pytestmark = pytest.mark.pure  # no database: runs beside the suite (tests/pure.py)

# nodes of three sizes and two models, so that whole GPUs, shares and 4- or 8-GPU units compete
NODES = [Node(f"n{k}", 96000, 393216, tuple(Gpu(i, "G" if k % 4 else "H") for i in range((8, 2, 4)[k % 3])))
         for k in range(12)]


def month(seed: int, rules: bool) -> tuple[list[Job], Policy]:
    """Five days of 500 requests; with the rules over time (a nightly shrink: most periods cross
    an edge and are weighed step by step, several times dearer) half of it, three nights."""
    days, requests = (2.5, 250) if rules else (5, 500)
    spec = GeneratorSpec(seed=seed, days=days, requests=requests, installed_gpus=sum(len(n.gpus) for n in NODES),
                         offered_load=1.5)
    policy = generated_policy(spec)
    return workload_generate(spec), policy_with_rules(policy, RULES_OVER_TIME) if rules else policy


def digest(lines: Iterable[object]) -> str:
    h = hashlib.sha256()
    for line in lines:
        h.update(repr(line).encode())
        h.update(b"\n")
    return h.hexdigest()[:16]


def outcome_digest(outcome: Outcome) -> str:
    """Every run, every request's first start, finish and restarts, and the replay's counts."""
    return digest([*outcome.runs, *((r.first_start, r.finish, r.restarts, r.in_guarantee) for r in outcome.records),
                   (outcome.reclaims, outcome.events, outcome.idle_warnings, outcome.idle_reclaims,
                    outcome.window_edges)])


def log_digest(log: list[Decision]) -> str:
    return digest(log)


def plain(seed: int, rules: bool, mode: str) -> str:
    jobs, policy = month(seed, rules)
    return outcome_digest(Replay(jobs, NODES, policy, mode).run())


def logged(seed: int, rules: bool) -> str:
    jobs, policy = month(seed, rules)
    return log_digest(replay_decisions(jobs, NODES, policy, "full")[0])


def fidelity_logged(seed: int) -> str:
    case = fidelity_case(300, seed=seed)
    return log_digest(replay_decisions(case.jobs, case.nodes, case.policy, "full")[0])


PLAIN = {
    (1, False, 'full'): 'fe0b438eb5eee2c9',
    (1, True, 'full'): '5e752c0633624ff0',
    (1, False, 'borrow'): '0d99db4ca51958ac',
    (1, False, 'static'): 'cb623fb0c8eec88e',
    (1, False, 'pool'): 'a4a1037a6b9cd4ad',
    (2, False, 'full'): 'a835a53979c3fffb',
    (2, True, 'full'): 'c2bfaed432cfc15d',
    (2, False, 'borrow'): '607b36a4d14b7976',
    (2, False, 'static'): 'b4bbce68accc7f5b',
    (2, False, 'pool'): 'd91fc14440c5944a',
    (3, False, 'full'): '3222b1c8abd31e08',
    (3, True, 'full'): 'f66cd12317459fad',
    (3, False, 'borrow'): 'c97a86e4afd993b0',
    (3, False, 'static'): '58c39e1775dd84bb',
    (3, False, 'pool'): '3f6b1cb59dc1c011',
}
LOGGED = {
    (1, False): '302d7cd771df63eb',
    (1, True): '46919bdcc67c2ab6',
    (2, False): '11d585b292d0cd49',
    (2, True): '506e723196e4f9b3',
}
FIDELITY = {
    1: 'f4f6265c9aea720d',
    2: '9ddb3417cd280e62',
}


@pytest.mark.parametrize(("seed", "rules", "mode"), list(PLAIN))
def test_a_plain_replay_decides_as_it_did(seed: int, rules: bool, mode: str) -> None:
    assert plain(seed, rules, mode) == PLAIN[(seed, rules, mode)]


@pytest.mark.parametrize(("seed", "rules"), list(LOGGED))
def test_the_decision_log_of_a_generated_month_is_as_it_was(seed: int, rules: bool) -> None:
    assert logged(seed, rules) == LOGGED[(seed, rules)]


@pytest.mark.parametrize("seed", list(FIDELITY))
def test_the_decision_log_of_the_fidelity_workload_is_as_it_was(seed: int) -> None:
    assert fidelity_logged(seed) == FIDELITY[seed]


def pins() -> str:
    """The three tables above as they stand now, to paste there when a rule changed on purpose."""
    out = ["PLAIN = {"]
    for seed in (1, 2, 3):
        for rules, mode in ((False, "full"), (True, "full"), (False, "borrow"), (False, "static"), (False, "pool")):
            out.append(f"    ({seed}, {rules}, {mode!r}): {plain(seed, rules, mode)!r},")
    out.append("}\nLOGGED = {")
    out += [f"    ({seed}, {rules}): {logged(seed, rules)!r}," for seed in (1, 2) for rules in (False, True)]
    out.append("}\nFIDELITY = {")
    out += [f"    {seed}: {fidelity_logged(seed)!r}," for seed in (1, 2)]
    return "\n".join([*out, "}", ""])


if __name__ == "__main__":
    import sys

    sys.stdout.write(pins())
