"""The portal's log output as a test sees it: the root logger's records, formatted by the
configured formatter into a buffer (and parsed back when JSON)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from kernel.logs.formatters import ConsoleFormatter, JsonFormatter


@dataclass
class Captured:
    stream: io.StringIO = field(default_factory=io.StringIO)

    @property
    def text(self) -> str:
        return self.stream.getvalue()

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.text.splitlines() if line.startswith("{")]

    def of(self, logger: str) -> list[dict[str, Any]]:
        return [record for record in self.records() if record["logger"] == logger]


def _capture(formatter: logging.Formatter) -> Iterator[Captured]:
    captured = Captured()
    handler = logging.StreamHandler(captured.stream)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    access = logging.getLogger("gpuportal.access")
    levels = root.level, access.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    access.setLevel(logging.DEBUG)
    try:
        yield captured
    finally:
        root.removeHandler(handler)
        root.setLevel(levels[0])
        access.setLevel(levels[1])


@pytest.fixture
def json_logs() -> Iterator[Captured]:
    yield from _capture(JsonFormatter())


@pytest.fixture
def console_logs() -> Iterator[Captured]:
    yield from _capture(ConsoleFormatter())
