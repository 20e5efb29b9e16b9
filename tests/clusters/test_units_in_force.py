"""The rule behind a node's MIG layout at an instant (``delivery.node_configs.units_in_force``):
every unit in force is kept; a unit of a grant on the cluster outside its interval is kept only
where it fits beside them, never two instances on one memory slice, never an instance on a GPU
booked whole."""

from __future__ import annotations

from delivery.node_configs import BookedUnit, units_in_force
from placement.mig import GEOMETRIES

A100 = GEOMETRIES["A100-80GB"]
ONE_NODE = {(1, index): A100 for index in range(8)}


def half(start: int, *, in_force: bool, gpu: int = 0) -> BookedUnit:
    return BookedUnit(node_id=1, gpu_indices=(gpu,), mig_profile="3g.40gb", mig_start=start, in_force=in_force)


def test_every_unit_in_force_is_kept_and_nothing_is_looked_up() -> None:
    units = [half(0, in_force=True), half(4, in_force=True)]
    assert units_in_force(units, {}) == units


def test_the_grant_in_force_wins_the_slices_a_held_grant_past_its_end_still_has() -> None:
    ended = [half(0, in_force=False), half(4, in_force=False)]
    started = [half(0, in_force=True), half(4, in_force=True)]
    assert units_in_force([*ended, *started], ONE_NODE) == started


def test_a_held_grant_keeps_the_slices_nothing_in_force_needs() -> None:
    ended, started = half(0, in_force=False), half(4, in_force=True)
    assert units_in_force([ended, started], ONE_NODE) == [started, ended]
    seven = BookedUnit(node_id=1, gpu_indices=(0,), mig_profile="1g.10gb", mig_start=0, in_force=True)
    assert units_in_force([ended, seven], ONE_NODE) == [seven]  # slice 0 is taken by one in force


def test_two_units_not_in_force_on_one_slice_keep_the_first_given() -> None:
    ended, early = half(0, in_force=False), half(0, in_force=False)
    assert units_in_force([ended, early], ONE_NODE) == [ended]


def test_a_gpu_booked_whole_and_an_instance_never_share_a_gpu() -> None:
    whole = BookedUnit(node_id=1, gpu_indices=(0, 1), in_force=True)
    assert units_in_force([half(0, in_force=False, gpu=1), whole], ONE_NODE) == [whole]
    instance = half(0, in_force=True, gpu=1)
    ended_whole = BookedUnit(node_id=1, gpu_indices=(1,), in_force=False)
    assert units_in_force([ended_whole, instance], ONE_NODE) == [instance]
    shared = BookedUnit(node_id=1, gpu_indices=(0,), in_force=False)
    assert units_in_force([shared, whole], ONE_NODE) == [whole, shared]  # whole or shared: no instance there


def test_an_instance_on_a_gpu_without_a_known_geometry_takes_the_whole_gpu() -> None:
    unknown = BookedUnit(node_id=1, gpu_indices=(0,), mig_profile="3g.40gb", mig_start=None, in_force=False)
    assert units_in_force([unknown, half(4, in_force=True)], ONE_NODE) == [half(4, in_force=True)]
    assert units_in_force([half(0, in_force=False), half(4, in_force=True)], {}) == [half(4, in_force=True)]
