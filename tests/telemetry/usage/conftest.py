"""A real Prometheus on loopback serving the recorded exporter output (tests/telemetry/usage/recording.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import World
from tests.telemetry.usage.recording import prometheus_serving
from tests.telemetry.usage.scene import Scene, build_scene, replayed_files


@pytest.fixture(scope="session")
def prometheus_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    workdir = tmp_path_factory.mktemp("prometheus")
    with prometheus_serving(replayed_files(workdir), workdir) as url:
        yield url


@pytest.fixture
def scene(world: World, prometheus_url: str) -> Scene:
    return build_scene(world, prometheus_url=prometheus_url)
