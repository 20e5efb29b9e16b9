"""The arithmetic of fair share, pure (no Django): decay, the decayed integral of a held interval,
Slurm's classic fair-share factor and Slurm's Fair Tree ranking.

**Decay.** Usage halves every half-life ``T``: ``decayed(u, t, T) = u · 0.5^(t/T)``, continuously
(Slurm applies the same decay every ``PriorityCalcPeriod``; Kueue's admission fair sharing and
KAI's time-aware fairness use the same half-life form). Written as a power of one half, one
half-life halves a value exactly (``pow(0.5, 1.0)`` is 0.5). A unit of weight ``w`` GPU-equivalents held over ``[a, b]``
weighs, seen at ``now``, ``∫ w·0.5^((now-t)/T) dt = w·T/ln 2·(0.5^((now-b)/T) - 0.5^((now-a)/T))``
(in hours: divided by 3600): decaying a total and adding what was held since gives the same
number as integrating everything at once, so the periodic tick composes exactly.

**Classic** (``doc/html/classic_fair_share.shtml``): ``S`` is the product of the normalised shares
down the path; an account's or user's effective usage ``UE = UA + (UE_parent - UA)·S_child /
S_all_siblings`` (the top tier's is its actual usage ``UA``); ``F = 2^(-UE/S)``. The portal does not
order by it; it is here to hold our reading of Slurm to its documented example.

**Fair Tree** (``doc/html/fair_tree.shtml``, Slurm's default since 19.05): among siblings, the
level fairshare ``LF = S/U`` with ``S = shares / Σ siblings' shares`` and ``U = usage / Σ
siblings' usage`` (infinite when ``U`` is 0, so when no sibling used anything all are infinite
and tie); siblings are sorted by ``LF``, highest first; the tree is walked depth-first and leaves
are ranked in the order met: the first gets rank ``N`` (the number of leaves) and factor
``rank/N = 1.0``. Ties, as Slurm's ``fair_tree.c`` handles them: sibling leaves with the same
``LF`` get the same rank; a leaf with the same ``LF`` as a sibling account is sorted before it and
the account's first leaf gets the leaf's rank; sibling accounts with the same ``LF`` have their
children merged before descending. So if account ``A`` has a higher ``LF`` than its sibling ``B``,
every leaf under ``A`` ranks above every leaf under ``B``.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass

LN2 = math.log(2)
SECONDS_PER_HOUR = 3600.0


def decayed(usage: float, elapsed_s: float, half_life_s: float) -> float:
    """``usage`` as it weighs ``elapsed_s`` seconds later, halved every ``half_life_s`` seconds."""
    if half_life_s <= 0 or elapsed_s < 0:
        raise ValueError("the half-life must be positive and the elapsed time not negative")
    return usage * math.pow(0.5, elapsed_s / half_life_s)


def held_decayed(weight: float, *, began_s_ago: float, ended_s_ago: float, half_life_s: float) -> float:
    """GPU-equivalent-hours of ``weight`` GPU-equivalents held from ``began_s_ago`` until
    ``ended_s_ago`` seconds ago, every moment decayed by its age. ``0.5^(e/T) - 0.5^(b/T)`` is
    written as ``0.5^(e/T)·(1 - 0.5^((b-e)/T))`` with ``expm1``, so that a five-minute interval
    under a week's half-life keeps its digits (the plain difference of two nearly equal powers
    loses them)."""
    if half_life_s <= 0 or ended_s_ago < 0 or began_s_ago < ended_s_ago:
        raise ValueError("an interval ends after it begins, not in the future, under a positive half-life")
    fraction = math.pow(0.5, ended_s_ago / half_life_s) * -math.expm1(-LN2 * (began_s_ago - ended_s_ago) / half_life_s)
    return weight * half_life_s / LN2 * fraction / SECONDS_PER_HOUR


@dataclass(frozen=True)
class Node:
    """An association: a leaf (a Slurm user; here a department without sub-departments, or a
    department's own projects) or an account with ``children``. ``usage`` counts for leaves only:
    an account's usage is the sum of its leaves'."""

    key: Hashable
    shares: float
    usage: float = 0.0
    children: tuple[Node, ...] = ()

    @property
    def is_leaf(self) -> bool:
        return not self.children


@dataclass(frozen=True)
class Standing:
    """A node among its siblings. ``level_fs`` is ``math.inf`` when ``usage_share`` is 0; ``rank``
    and ``factor`` are the Fair Tree ranking's, for leaves only."""

    share: float  # S: shares / Σ siblings' shares (the node's own included)
    usage: float  # the node's usage: a leaf's own, an account's leaves' sum
    usage_share: float  # U: usage / Σ siblings' usage; 0 when none of them used anything
    level_fs: float  # LF = S / U
    rank: int | None = None
    factor: float | None = None


@dataclass(frozen=True)
class Ranking:
    standings: dict[Hashable, Standing]
    leaf_count: int


@dataclass(frozen=True)
class Classic:
    share: float  # S: the product of the normalised shares from the top down to the node
    usage: float  # UA: actual usage (normalised: a fraction of what everyone used)
    effective_usage: float  # UE
    factor: float  # F = 2^(-UE/S)


def _walk(roots: Sequence[Node]) -> Iterator[Node]:
    stack = list(reversed(roots))
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(node.children))


def _totals(roots: Sequence[Node]) -> dict[Hashable, float]:
    """Each node's usage (an account's: its leaves'), checking that keys are unique and shares positive."""
    order = list(_walk(roots))
    if len({node.key for node in order}) != len(order):
        raise ValueError("every node of the tree needs a key of its own")
    if any(not node.shares > 0 or node.usage < 0 for node in order):
        raise ValueError("shares must be positive and usage not negative")
    totals: dict[Hashable, float] = {}
    for node in reversed(order):  # children before their parents
        totals[node.key] = node.usage if node.is_leaf else math.fsum(totals[child.key] for child in node.children)
    return totals


def _levels(roots: Sequence[Node], totals: dict[Hashable, float]) -> dict[Hashable, Standing]:
    out: dict[Hashable, Standing] = {}
    groups: list[Sequence[Node]] = [roots]
    while groups:
        siblings = groups.pop()
        shares = math.fsum(node.shares for node in siblings)
        used = math.fsum(totals[node.key] for node in siblings)
        for node in siblings:
            share = node.shares / shares
            usage_share = totals[node.key] / used if used > 0 else 0.0
            level_fs = share / usage_share if usage_share > 0 else math.inf
            out[node.key] = Standing(share=share, usage=totals[node.key], usage_share=usage_share, level_fs=level_fs)
            if node.children:
                groups.append(node.children)
    return out


def fair_tree(roots: Sequence[Node]) -> Ranking:
    """Every node's standing among its siblings, and each leaf's Fair Tree rank and factor."""
    levels = _levels(roots, _totals(roots))
    leaf_count = sum(1 for node in _walk(roots) if node.is_leaf)
    ranks: dict[Hashable, int] = {}
    rank = next_rank = leaf_count  # Slurm's rank and "rank, no ties"

    def visit(siblings: Sequence[Node], tied_in: bool) -> None:
        nonlocal rank, next_rank
        ordered = sorted(siblings, key=lambda node: (-levels[node.key].level_fs, not node.is_leaf))
        index = 0
        while index < len(ordered):
            node = ordered[index]
            level_fs = levels[node.key].level_fs
            tied = tied_in if index == 0 else level_fs == levels[ordered[index - 1].key].level_fs
            if node.is_leaf:
                if not tied:
                    rank = next_rank
                ranks[node.key] = rank
                next_rank -= 1
                index += 1
                continue
            end = index + 1  # sibling accounts with the same LF: their children are merged
            while end < len(ordered) and not ordered[end].is_leaf and levels[ordered[end].key].level_fs == level_fs:
                end += 1
            visit([child for account in ordered[index:end] for child in account.children], tied)
            index = end

    visit(roots, False)
    standings = {
        key: Standing(level.share, level.usage, level.usage_share, level.level_fs, ranks[key], ranks[key] / leaf_count)
        if key in ranks else level
        for key, level in levels.items()
    }
    return Ranking(standings=standings, leaf_count=leaf_count)


def department_forest(children: Mapping[int | None, Sequence[int]], shares: Mapping[int, float],
                      usage: Mapping[int, float]) -> list[Node]:
    """The departments as Fair Tree ranks them, from ``children`` (parent → its departments, in the
    order they are walked; ``None``: the top): a department without sub-departments is a leaf
    (key ``("department", id)``); one with them an account of that key whose children are a leaf of
    its own projects (``("own", id)``, one share, the department's own usage) and its
    sub-departments. ``usage`` is each department's own (what its own projects held)."""

    def node(department_id: int) -> Node:
        kids = children.get(department_id, ())
        if not kids:
            return Node(("department", department_id), shares[department_id], usage[department_id])
        own = Node(("own", department_id), 1, usage[department_id])
        return Node(("department", department_id), shares[department_id], children=(own, *map(node, kids)))

    return [node(root) for root in children.get(None, ())]


def department_factors(ranking: Ranking, children: Mapping[int | None, Sequence[int]]) -> dict[int, float]:
    """Department id → the factor of its own projects: its leaf's, or its own projects' leaf's when
    it has sub-departments (``department_forest``'s keys)."""
    departments = [department for kids in children.values() for department in kids]
    return {department: ranking.standings[("own" if children.get(department) else "department", department)].factor
            or 0.0 for department in departments}


def classic(roots: Sequence[Node]) -> dict[Hashable, Classic]:
    """Slurm's classic factor of every node; usage given as normalised usage (``U_H / R_H``)."""
    totals = _totals(roots)
    out: dict[Hashable, Classic] = {}
    groups: list[tuple[Sequence[Node], float, float | None]] = [(roots, 1.0, None)]  # siblings, S and UE of the parent
    while groups:
        siblings, parent_share, parent_effective = groups.pop()
        shares = math.fsum(node.shares for node in siblings)
        for node in siblings:
            actual = totals[node.key]
            share = parent_share * node.shares / shares
            effective = actual
            if parent_effective is not None:  # below the top tier
                effective += (parent_effective - actual) * node.shares / shares
            factor = math.pow(2, -effective / share)
            out[node.key] = Classic(share=share, usage=actual, effective_usage=effective, factor=factor)
            if node.children:
                groups.append((node.children, share, effective))
    return out
