"""The recorder writes what the replay serves: recording a replayed node gives the recording back."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pynvml
import pytest

from tests.agent.nvml_replay import NvmlReplay, load_recording
from tests.agent.record_inventory import record_node

ReplayNode = Callable[[str], tuple[NvmlReplay, Path]]


@pytest.mark.parametrize("name", ["a100-80gb-mig", "h100-80gb-no-mig", "h200-8gpu-node", "faulty-gpus-node"])
def test_recording_a_replayed_node_round_trips(replay_node: ReplayNode, name: str) -> None:
    _, proc_root = replay_node(name)
    pynvml.nvmlInit()
    try:
        recorded = record_node(proc_root, "")
    finally:
        pynvml.nvmlShutdown()
    original = load_recording(name)
    for part in ("system", "devices", "proc"):
        assert recorded[part] == original[part], part
