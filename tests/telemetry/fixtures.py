"""Helpers and fixtures for the portal side of the node agent: real reports from recorded inventories.

Reports are produced by the agent's own collector reading a recorded node through the NVML replay
layer of ``tests/agent``, so the portal is tested against exactly what an agent would send.
"""

from __future__ import annotations

import copy
import datetime
import functools
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from agent.collector import ReportContext, collect_report
from agent.nvml_calls import nvml_session
from agent.report import format_timestamp
from clusters.inventory import GpuSpec, node_upsert
from clusters.models import Cluster, Node
from telemetry.models import NodeToken
from telemetry.node_tokens import node_token_issue
from tests.agent.nvml_replay import NvmlReplay, load_recording, write_proc_root
from tests.conftest import World

STARTED = datetime.datetime(2026, 11, 29, 8, 0, 0, tzinfo=datetime.UTC)
A100 = "NVIDIA-A100-SXM4-80GB"


@functools.cache
def _recorded(name: str) -> dict[str, Any]:
    recording = load_recording(name)
    with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as monkeypatch:
        proc_root = write_proc_root(recording, Path(folder) / "proc")
        proc_root.mkdir(exist_ok=True)
        NvmlReplay(recording).install(monkeypatch)
        context = ReportContext(
            node_name="recorded", sequence=0, agent_started_at=STARTED, interval_seconds=30, proc_root=proc_root
        )
        with nvml_session():
            report = collect_report(context, now=STARTED)
    return dict(report)


def make_report(
    recording: str,
    *,
    node_name: str,
    sequence: int = 1,
    started: datetime.datetime = STARTED,
    collected: datetime.datetime | None = None,
    interval: int = 30,
) -> dict[str, Any]:
    """The report the agent sends for a recorded node, with the header of the given moment."""
    report = copy.deepcopy(_recorded(recording))
    report.update(
        node_name=node_name,
        sequence=sequence,
        agent_started_at=format_timestamp(started),
        collected_at=format_timestamp(collected or started + datetime.timedelta(seconds=interval * sequence)),
        interval_seconds=interval,
    )
    return report


def post_report(client: APIClient, node_name: str, report: Any, token: str | None, **extra: Any) -> Any:
    """POST a report (a dict, or raw bytes) as the agent does; the test client's response."""
    headers: dict[str, Any] = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token is not None else {}
    body = report if isinstance(report, bytes) else _json(report)
    return client.post(f"/api/v1/nodes/{node_name}/report", data=body, content_type="application/json", **headers, **extra)


def _json(value: Any) -> bytes:
    import json

    return json.dumps(value).encode()


def add_node(cluster: Cluster, name: str, *, gpus: int = 1, model: str = A100, labels: dict[str, str] | None = None,
             mig_capable: bool = True, memory_mib: int = 81920) -> Node:  # fmt: skip
    return node_upsert(
        actor=None, cluster=cluster, name=name, cpu_millicores=64000, memory_mib=524288, labels=labels,
        gpus=[GpuSpec(index=i, model=model, memory_mib=memory_mib, mig_capable=mig_capable) for i in range(gpus)],
    )  # fmt: skip


@pytest.fixture
def issue_token(world: World) -> Callable[..., tuple[NodeToken, str]]:
    def issue(node_name: str, cluster: Cluster | None = None) -> tuple[NodeToken, str]:
        return node_token_issue(
            actor=world.users["platform"], cluster_id=(cluster or world.cluster).pk, node_name=node_name
        )

    return issue


@pytest.fixture
def agent() -> APIClient:
    return APIClient()
