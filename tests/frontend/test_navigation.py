"""Each persona's navigation shows only what the role allows, and the pages behind it agree."""

from __future__ import annotations

import re

import pytest

from tests.conftest import World
from tests.frontend.conftest import Login

pytestmark = pytest.mark.django_db

LINKS = ["Dashboard", "Overview", "Request GPUs", "Approvals", "Usage", "Idle grants", "Clusters", "Catalogue", "Audit log",
         "What-ifs", "Django admin"]
EXPECTED = {
    "nlp_member": {"Dashboard", "Request GPUs", "Idle grants"},
    "speech_member": {"Dashboard", "Request GPUs", "Idle grants"},
    "nlp_admin": {"Dashboard", "Request GPUs", "Approvals", "Usage", "Idle grants", "Audit log", "What-ifs"},
    "auditor": {"Dashboard", "Idle grants", "Audit log"},
    "platform": {"Dashboard", "Overview", "Request GPUs", "Approvals", "Usage", "Idle grants", "Clusters", "Catalogue", "Audit log",
                 "What-ifs"},
    "nobody": set(),
}
PAGES = {"Overview": "/platform/", "Request GPUs": "/allocations/new/", "Approvals": "/approvals/", "Usage": "/usage/", "Idle grants": "/idle/",
         "Clusters": "/platform/clusters/", "Catalogue": "/platform/catalogue/", "Audit log": "/audit/", "What-ifs": "/what-ifs/"}


def nav_labels(html: str) -> set[str]:
    nav = re.search(r'<nav aria-label="Main".*?</nav>', html, re.S)
    assert nav is not None
    return {label for label in LINKS if f">{label}</a>" in nav.group(0)}


@pytest.mark.parametrize("persona", list(EXPECTED))
def test_it_shows_each_role_only_its_links(world: World, login: Login, persona: str) -> None:
    response = login(persona).get("/")
    assert response.status_code == 200
    assert nav_labels(response.content.decode()) == EXPECTED[persona]


@pytest.mark.parametrize("persona", list(EXPECTED))
def test_it_refuses_the_pages_missing_from_the_navigation(world: World, login: Login, persona: str) -> None:
    client = login(persona)
    for label, url in PAGES.items():
        status = client.get(url).status_code
        if label in EXPECTED[persona]:
            assert status == 200, (persona, url)
        elif label == "Request GPUs":
            assert status == 200  # it opens and says that the person has no project to request for
        else:
            assert status == 403, (persona, url)


def test_it_marks_the_current_page(world: World, login: Login) -> None:
    html = login("nlp_admin").get("/approvals/").content.decode()
    assert '<a href="/approvals/" aria-current="page">Approvals</a>' in html
    assert 'aria-current="page">Dashboard' not in html


def test_it_tells_someone_without_a_role_what_to_do(world: World, login: Login) -> None:
    html = login("nobody").get("/").content.decode()
    assert "You have no role yet" in html
    assert "My allocations" not in html


def test_it_sends_anonymous_visitors_to_the_login(world: World, login: Login) -> None:
    for url in ["/", *PAGES.values(), "/audit/export/"]:
        response = login(None).get(url)
        assert response.status_code == 302
        assert response["Location"].startswith("/login/?next=")


def test_it_gives_every_page_a_title_and_landmarks(world: World, login: Login) -> None:
    admin = login("platform")
    pages = [(admin, url) for url in ["/", *PAGES.values()]] + [(login(None), "/login/")]
    for client, url in pages:
        html = client.get(url).content.decode()
        assert re.search(r"<title>[^<·]+ · GPU Portal</title>", html), url
        assert '<main id="main"' in html and 'class="skip-link" href="#main"' in html, url
        assert html.count("<h1") == 1, url
