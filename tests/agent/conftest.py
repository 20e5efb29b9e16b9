"""Fixtures for the node agent's tests: a replayed NVML node and a stub portal."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.agent.nvml_replay import NvmlReplay, load_recording, write_proc_root
from tests.agent.portal_stub import PortalStub

NODE_NAME = "gpu-node-1"
TOKEN = "gpt_node_7Qm2xVf3kR9sLw8ZpN4tYb6HcJ1eUa5D"


@pytest.fixture
def replay_node(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[[str], tuple[NvmlReplay, Path]]:
    """Install a recording behind pynvml; returns the replay and a fake host /proc for it."""

    def install(name: str) -> tuple[NvmlReplay, Path]:
        recording = load_recording(name)
        proc_root = write_proc_root(recording, tmp_path / f"proc-{name}")
        proc_root.mkdir(exist_ok=True)
        return NvmlReplay(recording).install(monkeypatch), proc_root

    return install


@pytest.fixture
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """urllib honours *_proxy variables; the stub portal is on loopback and must be reached directly."""
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def portal(no_proxy: None) -> Iterator[PortalStub]:
    stub = PortalStub()
    yield stub
    stub.close()


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n", encoding="utf-8")
    return path
