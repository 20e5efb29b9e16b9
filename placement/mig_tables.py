"""Lookup tables that turn MIG legality questions into array indexing.

Every MIG GPU state (memory mask, used compute, ``+me`` count) of every geometry is encoded as
one integer *state index*; non-MIG GPU slots map to :data:`NO_MIG`, a row where nothing is legal.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from .arrays import BoolArray, IntArray
from .mig import COMPUTE_SLICES, GEOMETRIES, MEMORY_SLICES, MigGeometry, MigProfile, MigState

GEOMETRY_NAMES: tuple[str, ...] = tuple(GEOMETRIES)
STATES_PER_GEOMETRY = 1 << (MEMORY_SLICES + 4)  # mask (8 bits) | compute (3 bits) | media (1 bit)
NO_MIG = len(GEOMETRY_NAMES) * STATES_PER_GEOMETRY
TABLE_SIZE = NO_MIG + 1


def encode(geometry_id: int, state: MigState) -> int:
    return geometry_id * STATES_PER_GEOMETRY + (state.mask | state.compute << 8 | state.media << 11)


def decode(index: int) -> tuple[int, MigState]:
    gid, code = divmod(index, STATES_PER_GEOMETRY)
    return gid, MigState(code & 0xFF, (code >> 8) & 0x7, (code >> 11) & 0x1)


def geometry_id(name: str) -> int:
    return GEOMETRY_NAMES.index(name)


def _states() -> list[tuple[int, MigGeometry, MigState]]:
    out = []
    for gid, name in enumerate(GEOMETRY_NAMES):
        for mask in range(1 << MEMORY_SLICES):
            for compute in range(COMPUTE_SLICES + 1):
                for media in (0, 1):
                    out.append((gid, GEOMETRIES[name], MigState(mask, compute, media)))
    return out


@cache
def legal_table(profile_name: str) -> BoolArray:
    """``table[state_index]`` is True when ``profile_name`` has a legal start in that state."""
    table = np.zeros(TABLE_SIZE, dtype=np.bool_)
    for gid, geo, st in _states():
        prof = geo.by_name.get(profile_name)
        if prof is not None and geo.legal_starts(st, prof):
            table[encode(gid, st)] = True
    return table


@cache
def free_compute_table() -> IntArray:
    """``table[state_index]`` = free compute slices (0 for non-MIG slots)."""
    table = np.zeros(TABLE_SIZE, dtype=np.int64)
    for gid, _geo, st in _states():
        table[encode(gid, st)] = st.free_compute
    return table


@cache
def transitions(profile_name: str) -> tuple[IntArray, IntArray]:
    """For each state: the state index after adding ``profile_name`` at each start slot.

    Returns ``(after, start)`` of shape ``[TABLE_SIZE, MEMORY_SLICES]``; illegal entries are -1.
    """
    after = np.full((TABLE_SIZE, MEMORY_SLICES), -1, dtype=np.int64)
    start = np.full((TABLE_SIZE, MEMORY_SLICES), -1, dtype=np.int64)
    for gid, geo, st in _states():
        prof: MigProfile | None = geo.by_name.get(profile_name)
        if prof is None:
            continue
        i = encode(gid, st)
        for k, s in enumerate(geo.legal_starts(st, prof)):
            after[i, k] = encode(gid, geo.add(st, prof, s))
            start[i, k] = s
    return after, start


def tables_build() -> int:
    """Build every table now (every profile of every geometry): what a process does once at its
    start, so that no request pays for it. Returns how many profiles were built."""
    free_compute_table()
    names = sorted({profile.name for geometry in GEOMETRIES.values() for profile in geometry.profiles})
    for name in names:
        legal_table(name)
        transitions(name)
        chain_counts(name)
    return len(names)


UNSURE = -1
"""A state of :func:`chain_counts` whose count depends on where the instances start."""


@cache
def chain_counts(profile_name: str) -> IntArray:
    """``table[state_index]``: how many ``profile_name`` instances can be added to a GPU in that
    state one after another, wherever each starts; :data:`UNSURE` where the starts chosen change it.

    Worked out over every state: a state with no legal start counts 0; a state whose every legal
    start leads to a state of one same known count c counts c + 1; any other state is UNSURE. So
    where the table is not UNSURE, adding one instance anywhere legal lowers the count by exactly
    one (what ``placing.free_units`` rests on); the table checks this itself, state by state,
    rather than trusting an argument about aligned starts."""
    after, _ = transitions(profile_name)
    counts = np.full(TABLE_SIZE, UNSURE, dtype=np.int64)
    pending = {int(i) for i in np.flatnonzero((after >= 0).any(axis=1))}
    counts[[i for i in range(TABLE_SIZE) if i not in pending]] = 0
    while pending:  # an instance adds memory slices, so every chain ends: each pass settles the next
        settled = {}
        for index in pending:
            following = [int(n) for n in after[index] if n >= 0]
            if any(n in pending for n in following):
                continue
            nexts = {int(counts[n]) for n in following}
            settled[index] = nexts.pop() + 1 if len(nexts) == 1 and UNSURE not in nexts else UNSURE
        if not settled:
            raise AssertionError("MIG transitions with a cycle")
        for index, count in settled.items():
            counts[index] = count
        pending -= settled.keys()
    return counts
