"""GET /api/v1/allocations/{id}/utilisation/: who may read it, the buckets and the summary."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from django.utils import timezone

from allocations.models import Allocation, AllocationState
from telemetry.models import AllocationUsage
from tests.conftest import World

MIB = 1024 * 1024


def granted(world: World) -> Allocation:
    now = timezone.now()
    return Allocation.objects.create(
        project=world.llm, flavor=world.a100, quantity=1, priority_class=world.standard, cluster=world.cluster,
        starts_at=now - datetime.timedelta(days=8), ends_at=now + datetime.timedelta(days=1), justification="x",
        state=AllocationState.ACTIVE, requested_by=world.users["nlp_member"],
    )  # fmt: skip


def last_bucket() -> datetime.datetime:
    epoch = int(timezone.now().timestamp())
    return datetime.datetime.fromtimestamp(epoch - epoch % 300, tz=datetime.UTC) - datetime.timedelta(minutes=5)


def usage(allocation: Allocation, start: datetime.datetime, source: str = "dcgm", **values: Any) -> AllocationUsage:
    fields: dict[str, Any] = {"devices": 1, "coverage": 1.0, "activity": 0.5, "granted_gpu_eq": 1.0,
                              "memory_used_bytes": 1000 * MIB, "memory_granted_bytes": 81920 * MIB, **values}  # fmt: skip
    assert allocation.cluster is not None
    if "used_gpu_eq" not in fields:
        fields["used_gpu_eq"] = (
            fields["activity"] * fields["granted_gpu_eq"] if fields["activity"] is not None else None
        )
    return AllocationUsage.objects.create(
        allocation=allocation, cluster=allocation.cluster, department=allocation.project.department, bucket_start=start,
        source=source, **fields,
    )  # fmt: skip


def url(allocation: Allocation, window: str | None = None) -> str:
    return f"/api/v1/allocations/{allocation.pk}/utilisation/" + (f"?window={window}" if window else "")


@pytest.mark.parametrize(("persona", "status"), [("nlp_member", 200), ("nlp_admin", 200), ("auditor", 200), ("platform", 200),
                                                 ("vision_member", 404), ("speech_member", 404), ("nobody", 404), (None, 401)])  # fmt: skip
def test_only_those_who_may_read_the_allocation_see_its_utilisation(
    world: World, persona: str | None, status: int
) -> None:
    assert world.client(persona).get(url(granted(world))).status_code == status


def test_an_unknown_window_is_a_400_naming_the_field(world: World) -> None:
    response = world.client("nlp_member").get(url(granted(world), "2d"))
    assert response.status_code == 400 and "window" in response.json()["error"]["fields"]


def test_the_buckets_prefer_the_measured_source_and_the_summary_counts_known_buckets_only(world: World) -> None:
    allocation = granted(world)
    end = last_bucket()
    usage(allocation, end, activity=0.2, memory_used_bytes=3000 * MIB)
    usage(allocation, end, source="agent", activity=0.9)  # the same bucket from the agent: not shown
    usage(allocation, end - datetime.timedelta(minutes=5), coverage=0.4, activity=None, memory_used_bytes=None)
    usage(allocation, end - datetime.timedelta(minutes=10), source="agent", activity=0.6)
    usage(allocation, end - datetime.timedelta(hours=2), activity=1.0)  # outside the hour
    body = world.client("nlp_member").get(url(allocation, "1h")).json()
    assert body["window"] == "1h" and body["bucket_seconds"] == 300
    assert [(bucket["source"], bucket["activity"], bucket["coverage"]) for bucket in body["buckets"]] == [
        ("agent", 0.6, 1.0), ("dcgm", None, 0.4), ("dcgm", 0.2, 1.0),
    ]  # fmt: skip
    summary = body["summary"]
    assert summary["buckets"] == 3 and summary["known_buckets"] == 2
    assert summary["mean_activity"] == 0.4  # (0.6 + 0.2) / 2: the unknown bucket is not an idle one
    assert summary["coverage"] == 0.8
    assert summary["granted_gpu_eq_hours"] == 0.25 and summary["used_gpu_eq_hours"] == pytest.approx(0.8 / 12, abs=1e-6)
    assert summary["memory_used_bytes"] == 3000 * MIB and summary["memory_granted_bytes"] == 81920 * MIB
    assert summary["memory_used_ratio"] == pytest.approx(3000 / 81920, abs=1e-6)
    assert summary["sources"] == ["agent", "dcgm"]
    # the last bucket that ended (a later one when a boundary passed while the test ran)
    assert datetime.datetime.fromisoformat(body["until"]) - end in (
        datetime.timedelta(minutes=5),
        datetime.timedelta(minutes=10),
    )


def test_a_week_is_shown_by_the_hour(world: World) -> None:
    allocation = granted(world)
    hour = last_bucket().replace(minute=0) - datetime.timedelta(hours=3)
    for minutes, activity in ((0, 0.2), (5, 0.4), (10, None)):
        usage(allocation, hour + datetime.timedelta(minutes=minutes), activity=activity,
              coverage=0.0 if activity is None else 1.0, memory_used_bytes=minutes * MIB)  # fmt: skip
    body = world.client("nlp_member").get(url(allocation, "7d")).json()
    assert body["bucket_seconds"] == 3600
    [bucket] = body["buckets"]
    assert datetime.datetime.fromisoformat(bucket["start"]) == hour
    assert bucket["activity"] == pytest.approx(0.3) and bucket["coverage"] == pytest.approx(2 / 12, abs=1e-6)
    assert bucket["memory_used_bytes"] == 10 * MIB


def test_no_rows_is_an_empty_answer_not_an_idle_one(world: World) -> None:
    body = world.client("nlp_member").get(url(granted(world))).json()
    assert body["window"] == "24h" and body["buckets"] == []
    assert body["summary"]["mean_activity"] is None and body["summary"]["coverage"] == 0.0


def test_the_openapi_schema_describes_the_route(world: World) -> None:
    schema = world.client(None).get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    operation = schema["paths"]["/api/v1/allocations/{allocation_id}/utilisation/"]["get"]
    assert set(operation["responses"]) == {"200", "400", "401", "404", "406"}
    assert [parameter["name"] for parameter in operation["parameters"] if parameter["in"] == "query"] == ["window"]
    bucket = schema["components"]["schemas"]["UtilisationBucket"]
    assert bucket["properties"]["activity"]["nullable"] is True
