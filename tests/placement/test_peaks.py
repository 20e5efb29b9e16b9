"""What bookings held over time occupy at some instant (``placement.peaks``,
``MigGeometry.held``, ``allocations.booking.usage``): bookings that never meet in time count once,
bookings that meet add up, and a unit placed beside them over all of their spans fits at every
instant (issue 31, defect 1)."""

from __future__ import annotations

import datetime
import random
from collections.abc import Callable

import pytest

from allocations.booking.usage import reservation_usage
from allocations.models import Reservation
from placement import GEOMETRIES, Cluster, Gpu, MigSlice, Node, Placement, Rejection, Request, place
from placement.mig import MigState
from placement.peaks import ALWAYS, Span, peak_sum

A100 = GEOMETRIES["A100-80GB"]
MIB = 81920
EPOCH = datetime.datetime(2026, 12, 7, tzinfo=datetime.UTC)
MONDAY, TUESDAY, WEDNESDAY = (0.0, 10.0), (10.0, 20.0), (20.0, 30.0)


def mig_cluster(*slices: MigSlice) -> Cluster:
    gpu = Gpu(0, "NVIDIA-A100-SXM4-80GB", MIB, 0, "A100-80GB", slices)
    return Cluster([Node("a100-0", 64000, 512 * 1024, (gpu,))])


def mig_request(profile: str) -> Request:
    return Request(cpu_milli=1000, memory_mib=1024, gpu_count=1, mig_profile=profile)


def test_two_instances_that_never_meet_on_one_slice_occupy_it_once() -> None:
    held = A100.held([MigSlice("3g.40gb", 0, MONDAY), MigSlice("3g.40gb", 0, TUESDAY)])
    assert held == MigState(mask=0x0F, compute=3, media=0)
    cluster = mig_cluster(MigSlice("3g.40gb", 0, MONDAY), MigSlice("3g.40gb", 0, TUESDAY))
    decision = place(cluster, mig_request("3g.40gb"))
    assert isinstance(decision, Placement) and decision.mig_start == 4  # the other half, free at every instant
    assert cluster.mig_compute_used() == 3


def test_instances_that_meet_add_up_and_a_new_one_must_miss_every_slice_any_of_them_takes() -> None:
    meeting = A100.held([MigSlice("3g.40gb", 0, (0.0, 15.0)), MigSlice("3g.40gb", 4, (5.0, 20.0))])
    assert meeting == MigState(mask=0xFF, compute=6, media=0)
    apart = A100.held([MigSlice("3g.40gb", 0, MONDAY), MigSlice("3g.40gb", 4, TUESDAY)])
    assert apart == MigState(mask=0xFF, compute=3, media=0)  # no 4g.40gb fits beside both
    assert isinstance(place(mig_cluster(MigSlice("3g.40gb", 0, MONDAY), MigSlice("3g.40gb", 4, TUESDAY)),
                            mig_request("4g.40gb")), Rejection)
    media = A100.held([MigSlice("1g.10gb+me", 0, MONDAY), MigSlice("1g.10gb+me", 1, TUESDAY)])
    assert media.media == 1 and media.compute == 1


def test_two_instances_on_one_slice_at_one_instant_are_refused() -> None:
    with pytest.raises(ValueError, match="cannot start at memory slice 0"):
        A100.held([MigSlice("3g.40gb", 0, (0.0, 15.0)), MigSlice("3g.40gb", 0, (10.0, 20.0))])
    with pytest.raises(ValueError):
        A100.held([MigSlice("3g.40gb", 0), MigSlice("3g.40gb", 0)])  # held always: at once


def test_a_request_sees_the_slice_taken_when_it_meets_a_booking_and_free_between_them() -> None:
    booked = [MigSlice("3g.40gb", 0, MONDAY), MigSlice("3g.40gb", 0, WEDNESDAY)]

    def starts_for(interval: Span) -> tuple[int, ...]:
        meeting = [item for item in booked if item.during[0] < interval[1] and interval[0] < item.during[1]]
        cluster = mig_cluster(*meeting)
        return cluster.legal_mig_starts(0, 0, mig_request("3g.40gb"))

    assert starts_for((0.0, 30.0)) == (4,)  # over both: slice 0 is taken at some instant
    assert starts_for((5.0, 25.0)) == (4,)
    assert starts_for(TUESDAY) == (0, 4)  # between them, meeting neither: free


def test_shares_cpu_and_memory_count_the_most_held_at_one_instant() -> None:
    assert peak_sum([(MONDAY, 500), (TUESDAY, 500)]) == 500
    assert peak_sum([((0.0, 15.0), 500), ((10.0, 20.0), 500)]) == 1000
    assert peak_sum([(MONDAY, 300), (TUESDAY, 400), ((5.0, 25.0), 200)]) == 600
    assert peak_sum([(ALWAYS, 250), (MONDAY, 250), (WEDNESDAY, 250)]) == 500
    assert peak_sum([]) == 0


def row(*, node: int, gpu: int, days: tuple[int, int], milli: int = 0, profile: str = "", start: int | None = None,
        cpu: int = 4000, memory: int = 32768) -> Reservation:
    """An unsaved row of a grant over ``days`` (from EPOCH), as the kept state reads it."""
    reservation = Reservation(node_id=node, gpu_indices=[gpu], gpu_milli=milli, mig_profile=profile, mig_start=start,
                              cpu_millicores=cpu, memory_mib=memory)
    reservation.kept_starts = EPOCH + datetime.timedelta(days=days[0])  # type: ignore[attr-defined]
    reservation.kept_ends = EPOCH + datetime.timedelta(days=days[1])  # type: ignore[attr-defined]
    return reservation


def test_reservation_rows_that_never_meet_are_not_added_up() -> None:
    per_gpu, cpu, memory = reservation_usage([
        row(node=1, gpu=0, days=(0, 1), milli=1000), row(node=1, gpu=0, days=(1, 2), milli=1000),
        row(node=1, gpu=1, days=(0, 2), milli=250), row(node=1, gpu=1, days=(1, 3), milli=250),
        row(node=2, gpu=0, days=(0, 1), profile="3g.40gb", start=0),
        row(node=2, gpu=0, days=(1, 2), profile="3g.40gb", start=0),
    ])
    assert per_gpu[(1, 0)].milli == 1000  # a whole GPU one day, again the next: held once
    assert per_gpu[(1, 1)].milli == 500  # two shares held together on the second day
    assert cpu[1] == 12000 and memory[1] == 3 * 32768  # three rows meet on the second day
    assert cpu[2] == 4000 and memory[2] == 32768
    slices = per_gpu[(2, 0)].slices
    assert [item.start for item in slices] == [0, 0] and A100.held(slices) == MigState(mask=0x0F, compute=3)


def test_the_most_held_at_once_equals_a_count_at_every_instant_a_booking_begins() -> None:
    rng = random.Random(31)
    for _ in range(200):
        rows = [
            row(node=rng.randrange(2), gpu=rng.randrange(2), days=(begin, begin + rng.randint(1, 4)),
                milli=rng.choice([250, 500, 1000]), cpu=rng.choice([1000, 4000]), memory=rng.choice([1024, 8192]))
            for begin in (rng.randrange(10) for _ in range(rng.randint(1, 8)))
        ]
        per_gpu, cpu, memory = reservation_usage(rows)
        for node in {r.node_id for r in rows}:
            here = [r for r in rows if r.node_id == node]
            assert cpu[node] == most_at_a_start(here, lambda r: r.cpu_millicores)
            assert memory[node] == most_at_a_start(here, lambda r: r.memory_mib)
            for gpu in {int(r.gpu_indices[0]) for r in here}:
                on = [r for r in here if int(r.gpu_indices[0]) == gpu]
                assert per_gpu[(node, gpu)].milli == most_at_a_start(on, lambda r: r.gpu_milli)


def most_at_a_start(rows: list[Reservation], amount: Callable[[Reservation], int]) -> int:
    """Counted the slow way: at each instant a row begins, what the rows holding then add up to."""
    spans = [(r.kept_starts, r.kept_ends) for r in rows]  # type: ignore[attr-defined]
    return max(sum(amount(r) for r, (begin, end) in zip(rows, spans, strict=True) if begin <= at < end)
               for at, _ in spans)
