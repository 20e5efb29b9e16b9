"""A node agent posting reports with custody to the real report endpoint, a test step at a time."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

from rest_framework.test import APIClient

from allocations.models import Allocation
from custody.models import CustodyEvent
from tests.conftest import World
from tests.telemetry.fixtures import STARTED, make_report, post_report
from tests.telemetry.usage_history import grant

NODE = "h100-0"  # the World's first H100 node (8 GPUs), where H100 grants are booked


def pod_device(namespace: str, pod: str, device_id: str, *, uid: str | None = None, container: str = "main",
               sharing: str = "exclusive", resource: str = "nvidia.com/gpu") -> dict[str, Any]:  # fmt: skip
    return {"namespace": namespace, "pod": pod, "pod_uid": uid if uid is not None else f"uid-{pod}",
            "container": container, "resource": resource, "device_id": device_id, "sharing": sharing}  # fmt: skip


@dataclass
class Agent:
    """The agent of one node: each ``report`` is the next sequence number, one interval later."""

    client: APIClient
    token: str
    node: str = NODE
    started: datetime.datetime = STARTED
    sequence: int = 0
    at: datetime.datetime = STARTED
    interval: int = 30
    offset: float | None = 0.0
    sent: list[dict[str, Any]] = field(default_factory=list)

    def report(self, devices: list[dict[str, Any]] | None, *, error: str | None = None, skip: int = 0) -> dict[str, Any]:
        self.sequence += 1 + skip
        self.at += datetime.timedelta(seconds=self.interval * (1 + skip))
        body = make_report("h200-8gpu-node", node_name=self.node, sequence=self.sequence, started=self.started,
                           collected=self.at, interval=self.interval)  # fmt: skip
        if devices is not None:
            body["pod_devices"] = devices
        body["pod_resources_error"] = error
        body["clock_offset_seconds"] = self.offset
        response = post_report(self.client, self.node, body, self.token)
        assert response.status_code == 200, response.content
        assert response.json()["accepted"] is True
        self.sent.append(body)
        return body

    def restart(self, *, downtime: int = 60) -> None:
        """A new agent process (a restart, or the node's reboot): a new start time, sequence from 1."""
        self.at += datetime.timedelta(seconds=downtime)
        self.started, self.sequence = self.at, 0

    def gpu(self, index: int) -> str:
        uuid: str = make_report("h200-8gpu-node", node_name=self.node)["gpus"][index]["uuid"]
        return uuid


def h100_grant(world: World, project: str = "seg") -> Allocation:
    return grant(world, since=STARTED - datetime.timedelta(days=1), flavor="h100", project=project)


def intervals(**filters: Any) -> list[CustodyEvent]:
    return list(CustodyEvent.objects.filter(kind="closed", **filters).order_by("node_id", "chain_seq"))


def at(agent: Agent, sequence: int) -> datetime.datetime:
    """The time of the agent's report ``sequence`` (1-based, of what it sent)."""
    from custody.observations import parse_time

    return parse_time(agent.sent[sequence - 1]["collected_at"])
