"""Thin periodic tasks (see docs/telemetry.md for the beat schedule)."""

from __future__ import annotations

from celery import shared_task

from telemetry import samples, staleness
from telemetry.usage.ticking import allocations_utilisation_tick


@shared_task
def telemetry_nodes_mark_stale_task() -> int:
    return staleness.nodes_mark_stale()


@shared_task
def telemetry_samples_roll_up_task() -> dict[str, int]:
    return samples.gpu_samples_roll_up()


@shared_task
def telemetry_samples_trim_task() -> dict[str, int]:
    return samples.gpu_samples_trim()


@shared_task
def telemetry_utilisation_tick_task() -> dict[str, object]:
    """The utilisation rows of the 5-minute bucket that just ended (telemetry/usage/ticking.py)."""
    return allocations_utilisation_tick().as_dict()
