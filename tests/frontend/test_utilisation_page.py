"""The utilisation page, the allocation page's usage panel and the GPU map's overlay: what each
role sees, bad choices answered with a 400 naming the field, the demo's story on screen."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone

from telemetry.models import AllocationUsage
from telemetry.utilisation_reads import cluster_utilisation
from tests.conftest import World
from tests.frontend.conftest import Login, pending
from tests.telemetry.usage_history import FIVE, HOUR, aligned_now, fill, grant, usage

pytestmark = pytest.mark.django_db


def two_departments(world: World) -> None:
    """nlp: 2 GPUs half busy for two hours; vision: 1 GPU fully busy, its last hour unknown. Both
    periods end on the hour before the page is read."""
    now = aligned_now()
    nlp = grant(world, since=now - 2 * HOUR, quantity=2, until=now)
    fill(nlp, start=now - 2 * HOUR, end=now, activity=0.5)
    vision = grant(world, since=now - 2 * HOUR, project="seg", flavor="h100", until=now)
    fill(vision, start=now - 2 * HOUR, end=now - HOUR, activity=1.0)
    fill(vision, start=now - HOUR, end=now, activity=None)


def test_everyone_with_a_role_finds_it_in_the_navigation_and_outsiders_get_404(world: World, login: Login) -> None:
    for persona in ("nlp_member", "speech_member", "nlp_admin", "vision_admin", "auditor", "platform"):
        html = login(persona).get("/").content.decode()
        assert '<a href="/utilisation/">Utilisation</a>' in html, persona
        assert login(persona).get("/utilisation/").status_code == 200, persona
    assert "/utilisation/" not in login("nobody").get("/").content.decode()
    assert login("nobody").get("/utilisation/").status_code == 404
    anonymous = login(None).get("/utilisation/")
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/login/?next=")
    marked = login("nlp_member").get("/utilisation/?range=day").content.decode()
    assert '<a href="/utilisation/" aria-current="page">Utilisation</a>' in marked


def test_a_platform_admin_sees_the_cluster_and_every_department(world: World, login: Login) -> None:
    two_departments(world)
    html = login("platform").get(f"/utilisation/?cluster={world.cluster.pk}&range=day").content.decode()
    # Measured: nlp 4 GPU-h of which 2 busy, vision 1 GPU-h all busy; its unknown hour is not idle: 3 of 5.
    assert re.search(r'id="headline"><strong>60 % of allocated GPU-equivalents used</strong>', html)
    assert "3 GPU-equivalent-hours busy of 6 allocated" in html
    assert "83 % of the allocated hours had a reading" in html
    assert f"Cluster {world.cluster.name}" in html and 'id="chart-total"' in html
    assert 'id="department-nlp"' in html and 'id="department-vision"' in html
    assert html.count('<svg class="util-chart"') == 3
    assert '<a href="?cluster=' + str(world.cluster.pk) + '&amp;range=day" aria-current="page">Day</a>' in html


def test_a_member_sees_only_their_departments(world: World, login: Login) -> None:
    two_departments(world)
    html = login("nlp_member").get("/utilisation/?range=day").content.decode()
    assert f"Your departments on cluster {world.cluster.name}" in html
    assert 'id="department-nlp"' in html and 'id="department-vision"' not in html and "Vision" not in html
    assert re.search(r'id="headline"><strong>50 % of allocated GPU-equivalents used</strong>', html)
    vision = login("vision_admin").get("/utilisation/?range=day").content.decode()
    assert 'id="department-vision"' in vision and 'id="department-nlp"' not in vision
    assert "100 % of allocated GPU-equivalents used" in vision and "50 % of the allocated hours had a reading" in vision


@pytest.mark.parametrize(("query", "field"), [("range=year", "range"), ("cluster=abc", "cluster"), ("cluster=999999", "cluster")])
def test_a_bad_choice_is_a_400_naming_the_field(world: World, login: Login, query: str, field: str) -> None:
    response = login("nlp_member").get(f"/utilisation/?{query}")
    assert response.status_code == 400
    html = response.content.decode()
    errors = re.search(rf'id="id_{field}_error"[^>]*>(.*?)</', html, re.S)
    assert errors is not None and "Select a valid choice" in errors.group(1)
    assert '<svg class="util-chart"' not in html and 'id="utilisation-errors"' in html


def test_the_page_takes_a_fixed_number_of_queries(world: World, login: Login, django_assert_max_num_queries: Any) -> None:
    client = login("platform")
    two_departments(world)
    with django_assert_max_num_queries(16):
        assert client.get("/utilisation/?range=week").status_code == 200
    now = aligned_now()
    for index in range(5):
        more = grant(world, since=now - 5 * HOUR, project="seg" if index % 2 else "llm", flavor="h100" if index % 2 else "mig")
        fill(more, start=now - 5 * HOUR, end=now, activity=0.1 * index)
    with django_assert_max_num_queries(16):
        assert client.get("/utilisation/?range=week").status_code == 200


def test_the_allocation_page_shows_its_last_day_and_memory_against_its_share(world: World, login: Login) -> None:
    now = aligned_now()
    allocation = grant(world, since=now - 3 * HOUR)
    usage(allocation, at=now - 2 * FIVE, activity=0.25, memory_used=20 * 2**30, memory_granted=80 * 2**30)
    usage(allocation, at=now - FIVE, activity=None)
    html = login("nlp_member").get(f"/allocations/{allocation.pk}/").content.decode()
    assert 'id="allocation-usage"' in html and '<svg class="sparkline"' in html
    assert "Mean 25 % busy over the measured part of the last 24 hours" in html
    assert "Memory: 20 GiB of the 80 GiB its share allows (25 %)" in html
    assert 'class="bar-fill" width="25.0"' in html
    request = pending(world)
    assert 'id="allocation-usage"' not in login("nlp_member").get(f"/allocations/{request.pk}/").content.decode()
    silent = grant(world, since=now - HOUR)  # holding, never measured: unknown, not idle
    html = login("nlp_member").get(f"/allocations/{silent.pk}/").content.decode()
    assert "No reading in the last 24 hours: use is unknown, not idle." in html and "Memory: no reading." in html


def test_the_gpu_map_shows_how_busy_each_gpu_is_now(world: World, login: Login) -> None:
    now = timezone.now()
    bucket = now.replace(minute=now.minute - now.minute % 5, second=0, microsecond=0) - FIVE
    busy = grant(world, since=now - HOUR)
    usage(busy, at=bucket, activity=0.95)
    row = busy.reservations.select_related("node").get()
    html = login("platform").get(f"/platform/clusters/{world.cluster.pk}/").content.decode()
    figure = re.search(rf"<strong>{row.node.name}</strong>.*?</figure>", html, re.S)
    assert figure is not None
    assert f'aria-label="GPU {row.gpu_indices[0]} on {row.node.name}: grant #{busy.pk} ' in figure.group(0)
    assert "100 % allocated; busy 95 %" in figure.group(0)  # in the GPU's accessible name
    assert 'class="gpu-busy gpu-busy-high" width="95"' in figure.group(0)
    assert '<span class="gpu-label gpu-busy-label">busy 95 %</span>' in figure.group(0)
    assert "busy: unknown" in figure.group(0)  # the free GPUs: no reading
    assert f'href="/utilisation/?cluster={world.cluster.pk}"' in html


def test_the_demo_tells_its_story_from_about_30_to_over_80_percent(django_user_model: Any) -> None:
    call_command("seed_demo")
    written = AllocationUsage.objects.count()
    assert written > 4000
    call_command("seed_demo")
    assert AllocationUsage.objects.count() == written  # idempotent
    admin = django_user_model.objects.get(username="admin")
    from clusters.models import Cluster

    week = cluster_utilisation(user=admin, cluster_id=Cluster.objects.get(name="demo").pk, range_name="week")
    first_day = week.total.ratio_between(week.start, week.start + 24 * HOUR)
    last_day = week.total.ratio_between(week.end - 24 * HOUR - HOUR, week.end)
    assert first_day is not None and 0.2 <= first_day <= 0.4
    assert last_day is not None and last_day >= 0.8
    assert week.total.coverage is not None and 0.95 < week.total.coverage < 1  # the agent's two-hour outage
    assert {series.key for series in week.departments} == {"nlp", "vision"}
