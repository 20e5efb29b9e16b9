"""The fair-share page (``/fair-share/``: every role, the departments it reads) and the approvals
queue in fair-share order."""

from __future__ import annotations

import re

import pytest
from django.utils import timezone

from allocations.fair_share.reads import fair_share_factors
from allocations.models.fair_share import FairShare
from frontend.selectors import pending_for_decision
from tests.conftest import World
from tests.frontend.conftest import Login, pending

pytestmark = pytest.mark.django_db
PERSONAS = ["nlp_member", "speech_member", "nlp_admin", "vision_member", "vision_admin", "auditor", "platform"]


def rows_of(html: str) -> list[str]:
    """The ids of the table's rows, in order."""
    return re.findall(r'<tr id="fair-share-([a-z0-9-]+)"', html)


@pytest.mark.parametrize("persona", [*PERSONAS, "nobody"])
def test_every_role_and_only_a_role_has_the_page_in_its_navigation(world: World, login: Login, persona: str) -> None:
    html = login(persona).get("/").content.decode()
    nav = re.search(r'<nav aria-label="Main".*?</nav>', html, re.S)
    listed = nav is not None and '>Fair share</a>' in nav.group(0)
    assert listed == (persona != "nobody")


def test_it_opens_for_every_role_404s_without_one_and_sends_anonymous_visitors_to_the_login(
    world: World, login: Login
) -> None:
    for persona in PERSONAS:
        assert login(persona).get("/fair-share/").status_code == 200, persona
    assert login("nobody").get("/fair-share/").status_code == 404
    response = login(None).get("/fair-share/")
    assert response.status_code == 302 and response["Location"].startswith("/login/?next=")
    assert login("platform").post("/fair-share/").status_code == 405
    html = login("nlp_member").get("/fair-share/").content.decode()
    assert '<a href="/fair-share/" aria-current="page">Fair share</a>' in html


def test_the_table_renders_the_tree_with_its_numbers(world: World, login: Login) -> None:
    now = timezone.now()
    FairShare.objects.create(department=world.nlp, shares=3, usage=12.5, as_of=now)
    FairShare.objects.create(department=world.vision, usage=2.5, as_of=now)
    labelled = login("platform").get("/fair-share/").content.decode()
    # On a phone each row is a card and each cell shows its column's name (portal.css, table.cards).
    assert '<td data-label="Level fair share (S / U)">0.720</td>' in labelled
    html = re.sub(r' data-label="[^"]*"', "", labelled)
    assert rows_of(html) == [f"{world.acme.pk}", f"own-{world.acme.pk}", f"{world.nlp.pk}", f"own-{world.nlp.pk}",
                             f"{world.speech.pk}", f"{world.vision.pk}"]  # fmt: skip
    assert re.search(r"<title>Fair share · GPU Portal</title>", html) and html.count("<h1") == 1
    assert '<caption class="visually-hidden">' in html and '<th scope="col">Level fair share (S / U)</th>' in html
    assert 'class="fs-depth-2"><span class="visually-hidden">Level 3: </span>Speech team' in html
    assert "own projects of nlp" in html and "∞" in html  # acme's own projects and the speech team used nothing
    nlp = html.split(f'id="fair-share-{world.nlp.pk}"')[1].split("</tr>")[0]
    # nlp: 3 of 5 shares (acme's own projects 1, vision 1), 12.5 of 15 GPU-eq.-h: LF 0.6 / (5/6) = 0.72
    assert "<td>3</td><td>0.600</td><td>12.50</td>" in nlp and "<td>0.833</td>" in nlp and "<td>0.720</td>" in nlp
    vision = html.split(f'id="fair-share-{world.vision.pk}"')[1].split("</tr>")[0]
    # vision: LF (1/5) / (1/6) = 1.2, behind acme's own projects (∞), ahead of nlp's leaves
    assert "<td>1.200</td>" in vision and "<td>3 of 4</td>\n        <td>0.75</td>" in vision
    assert "style=" not in html and "<script>" not in html  # the strict CSP: no inline style or script


def test_each_role_sees_the_departments_it_reads(world: World, login: Login) -> None:
    assert rows_of(login("nlp_member").get("/fair-share/").content.decode()) == [
        f"{world.nlp.pk}", f"own-{world.nlp.pk}", f"{world.speech.pk}"
    ]
    assert rows_of(login("vision_admin").get("/fair-share/").content.decode()) == [f"{world.vision.pk}"]
    assert len(rows_of(login("auditor").get("/fair-share/").content.decode())) == 6


def test_the_approvals_queue_puts_the_least_served_department_first_then_the_oldest(world: World, login: Login) -> None:
    """nlp is far over its share, vision under it: vision's newer request comes before nlp's older
    ones, which keep their age order; each row shows its department's rank."""
    first, second = pending(world), pending(world, quantity=2)
    vision = pending(world, persona="vision_member", project="seg", flavor="h100")
    now = timezone.now()
    FairShare.objects.create(department=world.nlp, usage=50.0, as_of=now)
    FairShare.objects.create(department=world.vision, usage=1.0, as_of=now)

    factors = fair_share_factors(now=now)
    queue = list(pending_for_decision(user=world.users["platform"], factors=factors).values_list("pk", flat=True))
    assert queue == [vision.pk, first.pk, second.pk]
    assert list(pending_for_decision(user=world.users["platform"]).values_list("pk", flat=True)) == [
        first.pk, second.pk, vision.pk
    ]  # without the factors (the dashboard's count): oldest first
    html = login("platform").get("/approvals/").content.decode()
    order = [int(pk) for pk in re.findall(r'<input type="checkbox" name="selected" value="(\d+)"', html)]
    assert order == [vision.pk, first.pk, second.pk]
    assert "vision: rank 3 of 4" in html and "nlp: rank 1 of 4" in html and "factor 0.25" in html
    assert 'href="/fair-share/"' in html
