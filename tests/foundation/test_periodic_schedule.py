"""One periodic schedule (gpuportal/periodic.py), read by Celery beat and by the embedded default's
clock: beat runs every wanted entry; the clock runs every entry marked for it at the same interval,
and each other entry names what does its work without a broker, at the same interval."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from celery import Task
from django.conf import settings
from django.utils.module_loading import import_string

from audit.conf import audit_checkpoint_interval_seconds
from clusters import outbox
from gpuportal import clock, periodic
from gpuportal.periodic import CLOCK, SCHEDULE, Periodic, beat_schedule
from tests.architecture.imports import source_files

ROOT = Path(__file__).resolve().parents[2]
BY_NAME = {entry.name: entry for entry in SCHEDULE}


def test_every_entry_runs_a_task_and_each_name_is_used_once() -> None:
    assert len(BY_NAME) == len(SCHEDULE)
    assert all(isinstance(import_string(entry.task), Task) for entry in SCHEDULE)


def test_beat_runs_every_wanted_entry_at_its_interval() -> None:
    wanted = {entry.name for entry in SCHEDULE if entry.wanted(lambda name: getattr(settings, name))}

    assert set(settings.CELERY_BEAT_SCHEDULE) == wanted
    assert all(settings.CELERY_BEAT_SCHEDULE[name]["task"] == BY_NAME[name].task for name in wanted)


def test_a_switch_and_an_interval_setting_shape_beats_schedule() -> None:
    values = {"GPUPORTAL_AUDIT_CHECKPOINT_INTERVAL_SECONDS": 45, "GPUPORTAL_UTILISATION_EVERY": 600,
              "GPUPORTAL_LDAP_SERVER_URI": None, "GPUPORTAL_LDAP_SYNC_EVERY": 900, "GPUPORTAL_DEFRAG_EVERY": 120,
              "GPUPORTAL_DEMO_READINGS": False}

    schedule = beat_schedule(values)

    assert "tenants-ldap-sync" not in schedule
    assert "demo-usage-continue" not in schedule  # make run's demo only
    assert schedule["placement-defrag"]["schedule"] == 120.0
    assert schedule["audit-checkpoint-publish"]["schedule"] == 45.0


def test_the_settings_module_is_the_only_place_beats_schedule_is_written() -> None:
    writers = []
    for path in source_files():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            targets = node.targets if isinstance(node, ast.Assign) else []
            for target in targets:
                name = target.value if isinstance(target, ast.Subscript) else target
                if isinstance(name, ast.Name) and name.id == "CELERY_BEAT_SCHEDULE":
                    writers.append(str(path.relative_to(ROOT)))

    assert writers == ["gpuportal/settings.py"]


def test_what_the_clock_does_not_run_another_runner_does_at_beats_interval(settings: Any) -> None:
    others = {entry.name: entry.embedded for entry in SCHEDULE if entry.embedded != CLOCK}

    assert set(others) == {"allocations-expire", "audit-checkpoint-publish", "clusters-pushes-dispatch"}
    assert BY_NAME["clusters-pushes-dispatch"].seconds(lambda name: getattr(settings, name)) == outbox.SWEEP_SECONDS
    settings.GPUPORTAL_AUDIT_CHECKPOINT_INTERVAL_SECONDS = 17
    assert BY_NAME["audit-checkpoint-publish"].seconds(lambda name: getattr(settings, name)) == 17.0
    assert audit_checkpoint_interval_seconds() == 17


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The clock's tasks replaced by ones that record their entry's name."""
    ran: list[str] = []

    class Recorded:
        def __init__(self, name: str) -> None:
            self.name = name

        def apply(self) -> Recorded:
            ran.append(self.name)
            return self

        def get(self, *, propagate: bool) -> dict[str, int]:
            return {}

    monkeypatch.setattr(clock, "TASKS", {name: Recorded(name) for name in clock.TASKS})
    yield ran


def test_the_clock_runs_every_wanted_clock_entry_on_its_first_tick_then_each_when_due(
    recorded: list[str], monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    settings.GPUPORTAL_DEFRAG_EVERY = 0  # off: not run
    now = [1000.0]
    monkeypatch.setattr("gpuportal.clock.time", SimpleNamespace(monotonic=lambda: now[0]))  # the clock's only
    ticking = clock.Clock(interval=3600)
    expected = [e.name for e in SCHEDULE if e.embedded == CLOCK and e.name != "placement-defrag" and e.when is None]

    ticking.tick()
    assert recorded == expected
    recorded.clear()
    ticking.tick()
    assert recorded == ["allocations-timeline"]
    recorded.clear()
    now[0] += 300
    ticking.tick()
    assert recorded == ["allocations-timeline", *(n for n in expected[1:] if _seconds(BY_NAME[n]) <= 300)]


def test_a_failing_entry_is_logged_and_the_others_still_run(
    recorded: list[str], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken() -> None:
        raise RuntimeError("database went away")

    monkeypatch.setattr(clock.TASKS["clusters-drift-check"], "apply", broken)

    ran = clock.Clock(interval=3600).run_due()

    assert "clusters-drift-check" in ran and "accounting-usage-roll" in recorded
    assert "the in-process clusters-drift-check failed" in caplog.text


def _seconds(entry: Periodic) -> float:
    return entry.seconds(lambda name: getattr(settings, name))


def test_the_module_reads_no_django() -> None:
    """The settings module reads the schedule while it is being built."""
    imported = {
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(ast.parse(Path(periodic.__file__).read_text()))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert not any(str(name).startswith("django") for name in imported)
