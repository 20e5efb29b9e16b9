"""The dashboard shows every quota level that binds a researcher's requests: their department's and
each ancestor's, with the numbers admission counts, and the tightest marked (issue: alice saw nlp's
"3.54 of 12, within guarantee" while acme's limit, 0.28 left, refused her next request)."""

from __future__ import annotations

import datetime
import re
from decimal import Decimal

import pytest
from django.utils import timezone

from allocations.admission.headroom import quota_chains
from allocations.models import Allocation, AllocationState, Flavor, Quota, SharingMode
from frontend.outlook import admission_read, request_allocation
from tenants.models import Project
from tests.conftest import A100, World
from tests.frontend.conftest import Login

pytestmark = pytest.mark.django_db


def text_of(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).strip()


def holding(world: World, project: Project, flavor: Flavor, quantity: int) -> Allocation:
    now = timezone.now()
    return Allocation.objects.create(
        project=project, flavor=flavor, quantity=quantity, priority_class=world.standard, cluster=world.cluster,
        starts_at=now - datetime.timedelta(days=1), ends_at=now + datetime.timedelta(days=5), justification="held",
        state=AllocationState.ACTIVE, requested_by=world.users["nlp_member"],
    )  # fmt: skip


def acme_nearly_full(world: World) -> None:
    """The demo's numbers: nlp (8 guaranteed, 12 limit) holds 3.54 GPU-equivalents, well within its
    guarantee; acme above it (16) holds 15.72 across nlp, vision and its own project."""
    Quota.objects.filter(department__in=[world.nlp, world.vision], flavor=None).update(
        guaranteed=Decimal(8), limit=Decimal(12))
    share = Flavor.objects.create(
        name="a100-share", display_name="A100 time-sliced share", gpu_model=A100, sharing_mode=SharingMode.TIMESLICE,
        resource_name="nvidia.com/gpu.shared", replicas=2, memory_mib=40960, compute_percent=50,
        gpu_equivalents=Decimal("0.59"),
    )
    platform = Project.objects.create(slug="acme-platform", name="Platform", department=world.acme)
    holding(world, world.llm, share, 6)  # nlp: 3.54
    holding(world, world.seg, world.h100, 8)  # vision: 8 + 1.18
    holding(world, world.seg, share, 2)
    holding(world, platform, world.a100, 3)  # acme's own project: 3


def level_line(html: str, department: str, above: str, counter: int) -> str:
    match = re.search(rf'<li class="level[^"]*" id="level-{department}-{above}-{counter}">(.*?)</li>', html, re.S)
    assert match is not None, (department, above, counter)
    return text_of(match.group(1))


def test_the_dashboard_shows_the_ancestor_whose_limit_refuses_first(world: World, login: Login) -> None:
    acme_nearly_full(world)
    html = login("nlp_member").get("/").content.decode()
    assert "What limits a request in nlp" in html
    chain = quota_chains(department_ids=[world.nlp.pk])[0]
    gpu_eq = len(chain.groups)  # GPU-equivalents come last, after the flavors' units
    assert [level.department for level in chain.groups[-1]] == ["nlp", "acme"]
    assert level_line(html, "nlp", "nlp", gpu_eq) == "nlp : 3.54 of 12 held, 8.46 left · guaranteed 8"
    assert level_line(html, "nlp", "acme", gpu_eq) == (
        "acme (above nlp) : 15.72 of 16 held, 0.28 left · guaranteed 0 tightest: the limit a request meets first")
    assert 'class="level level-tightest" id="level-nlp-acme-' in html
    assert html.count("level-tightest") == 1  # nlp's own flavor quotas have no level above them

    # The same numbers as the decision approval would make on her next request: five a100 units fit
    # every quota of nlp's (beyond its guarantee, so nothing is reclaimed for them), and acme refuses.
    start = timezone.now()
    admission = admission_read(allocation=request_allocation(
        project=world.llm, flavor=world.a100, quantity=5, priority_class=world.standard, cluster=None,
        span=(start, start + datetime.timedelta(days=1))))
    decision = admission.decision
    assert decision.refusal is not None and "acme" in decision.refusal.message
    verdicts = {(check["department"], check["flavor"]): fits
                for check, fits in zip(decision.checks, decision.quota_fits, strict=True)}
    assert verdicts == {("nlp", "a100"): True, ("nlp", None): True, ("acme", None): False}
    numbers = {(check["department"], check["flavor"]): Decimal(str(check["in_use"])) for check in decision.checks}
    assert numbers[("acme", None)] == Decimal("15.72") and numbers[("nlp", None)] == Decimal("3.54")


def test_a_guarantee_kept_from_lending_counts_as_admission_counts_it(world: World, login: Login) -> None:
    """vision lends at most 2 of its 8 guaranteed GPU-equivalents: acme counts the other 6 as held
    even while vision uses none, as admission does (not what the grants hold, which is 0)."""
    Quota.objects.filter(department=world.vision, flavor=None).update(guaranteed=Decimal(8),
                                                                          lending_limit=Decimal(2))
    html = login("nlp_member").get("/").content.decode()
    groups = quota_chains(department_ids=[world.nlp.pk])[0].groups
    acme = next(level for level in groups[-1] if level.department == "acme")
    assert (acme.holds, acme.limit, acme.left) == (Decimal(6), Decimal(16), Decimal(10))
    assert level_line(html, "nlp", "acme", len(groups)).startswith("acme (above nlp) : 6 of 16 held, 10 left")
    start = timezone.now()
    admission = admission_read(allocation=request_allocation(
        project=world.llm, flavor=world.a100, quantity=1, priority_class=world.standard, cluster=None,
        span=(start, start + datetime.timedelta(days=1))))
    acme_check = next(check for check in admission.decision.checks if check["department"] == "acme")
    assert Decimal(str(acme_check["in_use"])) == acme.holds


def test_a_team_sees_each_department_above_it(world: World, login: Login) -> None:
    html = login("speech_member").get("/").content.decode()
    assert "What limits a request in nlp-speech" in html
    assert "nlp (above nlp-speech)" in text_of(html) and "acme (above nlp-speech)" in text_of(html)
    assert "What limits a request" not in login("nobody").get("/").content.decode()  # no role: no department
