"""The arithmetic of fair share (``allocations.fair_share.tree``), pure: decay, the decayed integral,
Slurm's documented classic example and its Fair Tree ranking, the tie rules, and properties."""

from __future__ import annotations

import math
import random
from collections.abc import Hashable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocations.fair_share.tree import Node, classic, decayed, fair_tree, held_decayed

WEEK = 7 * 24 * 3600.0
HOUR = 3600.0


# ----------------------------------------------------------------------------------------- decay


@given(usage=st.floats(min_value=0, max_value=1e12), half_life=st.floats(min_value=1, max_value=1e9))
def test_decay_halves_exactly_at_the_half_life(usage: float, half_life: float) -> None:
    assert decayed(usage, half_life, half_life) == usage * 0.5
    assert decayed(usage, 2 * half_life, half_life) == usage * 0.25
    assert decayed(usage, 0.0, half_life) == usage


def test_decay_of_a_week_under_the_default_half_life() -> None:
    assert decayed(10.0, WEEK, WEEK) == 5.0
    assert decayed(10.0, 3 * WEEK, WEEK) == 1.25
    assert decayed(10.0, WEEK / 2, WEEK) == pytest.approx(10 / math.sqrt(2), rel=1e-15)
    with pytest.raises(ValueError):
        decayed(1.0, -1.0, WEEK)
    with pytest.raises(ValueError):
        decayed(1.0, 1.0, 0.0)


def riemann(weight: float, began: float, ended: float, half_life: float, steps: int = 200_000) -> float:
    """The same integral by the midpoint rule, in hours: ``steps`` slices of the interval."""
    width = (began - ended) / steps
    return math.fsum(weight * 0.5 ** ((ended + (i + 0.5) * width) / half_life) * width for i in range(steps)) / HOUR


@pytest.mark.parametrize(
    ("weight", "began", "ended", "half_life"),
    [
        (1.0, WEEK + HOUR, WEEK, WEEK),  # one GPU for an hour, one half-life ago
        (2.0, 3 * WEEK, 0.0, WEEK),  # two GPUs for three weeks up to now
        (0.1429, 10 * HOUR, 9 * HOUR, 2 * HOUR),  # a MIG slice under a short half-life
        (0.25, 300.0, 0.0, WEEK),  # an MPS share for the last five minutes
    ],
)
def test_the_decayed_integral_equals_a_fine_numerical_sum(weight: float, began: float, ended: float,
                                                          half_life: float) -> None:  # fmt: skip
    assert held_decayed(weight, began_s_ago=began, ended_s_ago=ended, half_life_s=half_life) == pytest.approx(
        riemann(weight, began, ended, half_life), rel=1e-9
    )


def test_an_hour_held_one_half_life_ago_weighs_about_half_an_hour() -> None:
    held = held_decayed(1.0, began_s_ago=WEEK + HOUR, ended_s_ago=WEEK, half_life_s=WEEK)
    assert held == pytest.approx(WEEK / math.log(2) * (0.5 - 0.5 ** (1 + HOUR / WEEK)) / HOUR, rel=1e-12)
    assert 0.5 * 0.5 ** (1 / 168) < held < 0.5  # every moment of it is one half-life old or older


@given(
    weight=st.floats(min_value=0.0001, max_value=64),
    ended=st.floats(min_value=0, max_value=20 * WEEK),
    length=st.floats(min_value=1, max_value=4 * WEEK),
    later=st.floats(min_value=0, max_value=4 * WEEK),
    cut=st.floats(min_value=0, max_value=1),
)
def test_the_integral_decays_and_adds_up_as_the_tick_needs(weight: float, ended: float, length: float, later: float,
                                                          cut: float) -> None:  # fmt: skip
    """Seen ``later`` seconds on, an interval weighs its old weight decayed (so a tick may decay a
    total and add what was held since); and an interval is the sum of its two parts."""
    began = ended + length
    now = held_decayed(weight, began_s_ago=began, ended_s_ago=ended, half_life_s=WEEK)
    then = held_decayed(weight, began_s_ago=began + later, ended_s_ago=ended + later, half_life_s=WEEK)
    assert then == pytest.approx(decayed(now, later, WEEK), rel=1e-8)
    middle = ended + cut * length
    parts = held_decayed(weight, began_s_ago=began, ended_s_ago=middle, half_life_s=WEEK) + held_decayed(
        weight, began_s_ago=middle, ended_s_ago=ended, half_life_s=WEEK
    )
    assert parts == pytest.approx(now, rel=1e-8)


def test_a_second_under_a_week_keeps_its_digits() -> None:
    """The plain difference of two powers would lose about six of the sixteen digits here."""
    held = held_decayed(1.0, began_s_ago=WEEK + 1, ended_s_ago=WEEK, half_life_s=WEEK)
    exact = 0.5 / HOUR * WEEK / math.log(2) * -math.expm1(-math.log(2) / WEEK)
    assert held == pytest.approx(exact, rel=1e-14)
    assert held == pytest.approx(0.5 / HOUR, rel=1e-6)


def test_an_interval_cannot_end_before_it_begins_or_in_the_future() -> None:
    with pytest.raises(ValueError):
        held_decayed(1.0, began_s_ago=10, ended_s_ago=20, half_life_s=WEEK)
    with pytest.raises(ValueError):
        held_decayed(1.0, began_s_ago=10, ended_s_ago=-1, half_life_s=WEEK)


# --------------------------------------------------------------------------- Slurm's documented example


def slurm_example() -> list[Node]:
    """``doc/html/classic_fair_share.shtml``'s example: root → A (40 shares) {B (30) {user1},
    C (10) {user2 (1), user3 (1)}}, D (60) {E (25) {user4}, F (35) {user5}}; usage user1 0.2,
    user2 0.25, user4 0.25, the others 0."""
    a = Node("A", 40, children=(
        Node("B", 30, children=(Node("user1", 1, 0.2),)),
        Node("C", 10, children=(Node("user2", 1, 0.25), Node("user3", 1, 0.0))),
    ))  # fmt: skip
    d = Node("D", 60, children=(
        Node("E", 25, children=(Node("user4", 1, 0.25),)),
        Node("F", 35, children=(Node("user5", 1, 0.0),)),
    ))  # fmt: skip
    return [a, d]


def test_the_classic_factors_are_slurms_documented_ones() -> None:
    found = classic(slurm_example())
    assert {key: round(found[key].effective_usage, 4) for key in "BCEF"} == {
        "B": 0.3875, "C": 0.3, "E": 0.25, "F": 0.1458,
    }  # fmt: skip
    assert {f"user{n}": round(found[f"user{n}"].share, 6) for n in range(1, 6)} == {
        "user1": 0.3, "user2": 0.05, "user3": 0.05, "user4": 0.25, "user5": 0.35,
    }  # fmt: skip
    assert {f"user{n}": round(found[f"user{n}"].factor, 6) for n in range(1, 6)} == {
        "user1": 0.408479, "user2": 0.022097, "user3": 0.125, "user4": 0.5, "user5": 0.749154,
    }  # fmt: skip
    assert found["A"].effective_usage == pytest.approx(0.45)  # the top tier's is its actual usage
    assert found["D"].effective_usage == 0.25


def test_fair_tree_ranks_slurms_example() -> None:
    """By hand, ``LF = S/U`` among siblings:

    * root: A has S = 40/100 = 0.4 and U = 0.45/0.70 = 0.643, LF = 0.622; D has S = 0.6 and
      U = 0.25/0.70 = 0.357, LF = 1.68. D comes first.
    * under D: E has S = 25/60 and U = 0.25/0.25 = 1, LF = 0.417; F has no usage, LF = ∞. F first:
      user5 gets rank 5 (factor 5/5 = 1.0), then user4 (under E) rank 4 (0.8).
    * under A: B has S = 30/40 = 0.75 and U = 0.2/0.45 = 0.444, LF = 1.6875; C has S = 0.25 and
      U = 0.25/0.45 = 0.556, LF = 0.45. B first: user1 rank 3 (0.6).
    * under C: user3 has no usage (∞), user2 has S = 0.5, U = 1, LF = 0.5: user3 rank 2 (0.4),
      user2 rank 1 (0.2).

    So user5, user4, user1, user3, user2 (the classic factors happen to agree on this order), and
    every user of D above every user of A, as D's LF is higher than A's.
    """
    ranking = fair_tree(slurm_example())
    standings = ranking.standings
    assert ranking.leaf_count == 5
    assert {f"user{n}": (standings[f"user{n}"].rank, standings[f"user{n}"].factor) for n in range(1, 6)} == {
        "user5": (5, 1.0), "user4": (4, 0.8), "user1": (3, 0.6), "user3": (2, 0.4), "user2": (1, 0.2),
    }  # fmt: skip
    assert standings["A"].level_fs == pytest.approx(0.4 / (0.45 / 0.7))
    assert standings["D"].level_fs == pytest.approx(1.68)
    assert standings["B"].level_fs == pytest.approx(1.6875) and standings["C"].level_fs == pytest.approx(0.45)
    assert standings["F"].level_fs == math.inf and standings["user3"].level_fs == math.inf
    assert standings["A"].rank is None and standings["A"].factor is None  # accounts are not ranked


# ----------------------------------------------------------------------------------------------- ties


def test_sibling_leaves_with_the_same_level_fairshare_share_a_rank() -> None:
    ranking = fair_tree([Node("a", 1, 2.0), Node("b", 1, 2.0), Node("c", 2, 1.0)])
    # c: S = 1/2, U = 1/5, LF = 2.5; a and b: S = 1/4, U = 2/5, LF = 0.625 each.
    assert {key: ranking.standings[key].rank for key in "abc"} == {"c": 3, "a": 2, "b": 2}
    assert ranking.standings["a"].factor == ranking.standings["b"].factor == pytest.approx(2 / 3)


def test_nobody_used_anything_so_everybody_ties_first() -> None:
    idle = Node("A", 40, children=(Node("B", 30, children=(Node("user1", 1),)),
                                   Node("C", 10, children=(Node("user2", 1), Node("user3", 2)))))
    ranking = fair_tree([idle, Node("solo", 3)])
    leaves = {key: s for key, s in ranking.standings.items() if s.rank is not None}
    assert set(leaves) == {"user1", "user2", "user3", "solo"}
    assert {(s.rank, s.factor, s.level_fs, s.usage_share) for s in leaves.values()} == {(4, 1.0, math.inf, 0.0)}


def test_a_leaf_tied_with_a_sibling_account_shares_its_first_rank() -> None:
    """``u`` and account ``A`` have LF 1 each: the leaf is sorted first; A's best leaf gets u's rank."""
    ranking = fair_tree([Node("A", 1, children=(Node("a1", 1, 0.25), Node("a2", 1, 0.75))), Node("u", 1, 1.0)])
    ranks = {key: ranking.standings[key].rank for key in ("u", "a1", "a2")}
    assert ranks == {"u": 3, "a1": 3, "a2": 1}


def test_sibling_accounts_with_the_same_level_fairshare_are_merged_before_descending() -> None:
    """A and B tie (same shares, same usage). Merged, their children are ranked together by their
    own LF: a2 and b1 (no usage, ∞) share the top rank, a1 and b2 (LF 0.5) the next. Visited one
    after the other instead, all of A would come before all of B (4, 3, 2, 1)."""
    a = Node("A", 1, children=(Node("a1", 1, 1.0), Node("a2", 1, 0.0)))
    b = Node("B", 1, children=(Node("b1", 1, 0.0), Node("b2", 1, 1.0)))
    ranking = fair_tree([a, b])
    ranks = {key: ranking.standings[key].rank for key in ("a1", "a2", "b1", "b2")}
    assert ranks == {"a2": 4, "b1": 4, "a1": 2, "b2": 2}


def test_a_tree_needs_unique_keys_and_positive_shares() -> None:
    with pytest.raises(ValueError, match="key"):
        fair_tree([Node("x", 1), Node("A", 1, children=(Node("x", 1),))])
    with pytest.raises(ValueError, match="shares"):
        fair_tree([Node("x", 0)])
    with pytest.raises(ValueError, match="usage"):
        fair_tree([Node("x", 1, -1.0)])


# ----------------------------------------------------------------------------------------- properties


@st.composite
def trees(draw: st.DrawFn) -> list[Node]:
    """Up to three levels of up to four siblings, few distinct shares and usages (so ties happen)."""
    counter = iter(range(10_000))

    def grow(depth: int) -> Node:
        key = f"n{next(counter)}"
        shares = draw(st.sampled_from([1, 1, 2, 3]))
        if depth < 3 and draw(st.booleans()):
            return Node(key, shares, children=tuple(grow(depth + 1) for _ in range(draw(st.integers(1, 4)))))
        return Node(key, shares, draw(st.sampled_from([0.0, 0.0, 0.5, 1.0, 2.0, 7.25])))

    return [grow(0) for _ in range(draw(st.integers(1, 4)))]


def shuffled(nodes: list[Node] | tuple[Node, ...], rng: random.Random) -> list[Node]:
    out = [Node(n.key, n.shares, n.usage, tuple(shuffled(n.children, rng))) for n in nodes]
    rng.shuffle(out)
    return out


def leaves_under(node: Node) -> list[Hashable]:
    return [node.key] if node.is_leaf else [key for child in node.children for key in leaves_under(child)]


def sibling_groups(roots: list[Node]) -> list[list[Node]]:
    groups, todo = [], [roots]
    while todo:
        group = todo.pop()
        groups.append(group)
        todo.extend(list(node.children) for node in group if node.children)
    return groups


@settings(max_examples=200)
@given(roots=trees(), seed=st.integers(0, 2**32 - 1))
def test_the_factors_are_a_ranking_that_does_not_depend_on_the_order_siblings_come_in(roots: list[Node],
                                                                                     seed: int) -> None:  # fmt: skip
    ranking = fair_tree(roots)
    factors = {key: s.factor for key, s in ranking.standings.items() if s.factor is not None}
    assert len(factors) == ranking.leaf_count and max(factors.values()) == 1.0
    for key, factor in factors.items():  # competition ranking: N minus those strictly better
        better = sum(1 for other in factors.values() if other > factor)
        rank = ranking.standings[key].rank
        assert rank == ranking.leaf_count - better
        assert factor == rank / ranking.leaf_count
    again = fair_tree(shuffled(roots, random.Random(seed)))
    assert {key: s.factor for key, s in again.standings.items() if s.factor is not None} == factors


@settings(max_examples=200)
@given(roots=trees())
def test_a_sibling_with_a_higher_level_fairshare_ranks_all_its_leaves_above(roots: list[Node]) -> None:
    """Fair Tree's promise; in particular a department with no usage is never ranked below a
    sibling with usage (its LF is ∞), whatever their shares."""
    ranking = fair_tree(roots)
    factor = {key: s.factor for key, s in ranking.standings.items() if s.factor is not None}
    for group in sibling_groups(roots):
        for x in group:
            for y in group:
                if ranking.standings[x.key].level_fs > ranking.standings[y.key].level_fs:
                    assert min(factor[k] for k in leaves_under(x)) > max(factor[k] for k in leaves_under(y))
                x_idle = ranking.standings[x.key].usage == 0 and ranking.standings[y.key].usage > 0
                if x_idle and x.shares == y.shares:
                    assert min(factor[k] for k in leaves_under(x)) > max(factor[k] for k in leaves_under(y))
