"""Where people choose a flavor, they see what its sharing mode is for, its caveats and the node
minimums: the request form's live feedback (HTMX) and the catalogue page."""

from __future__ import annotations

import html as html_lib
import re

import pytest

from allocations.catalogue.sharing_guide import GUIDES
from allocations.models import Flavor
from clusters.models import Node
from tests.conftest import World
from tests.frontend.conftest import Login

pytestmark = pytest.mark.django_db


def text_of(page: str) -> str:
    return html_lib.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page)))


def section(page: str, element_id: str) -> str:
    match = re.search(rf'<section id="{element_id}".*?</section>', page, re.S)
    assert match is not None, f"no #{element_id}"
    return text_of(match.group(0))


def feedback(world: World, login: Login, flavor: Flavor, **params: str | int) -> str:
    query: dict[str, str | int] = {"project": world.llm.pk, "flavor": flavor.pk, "quantity": 1,
                                   "priority_class": world.standard.pk, **params}
    response = login("nlp_member").get("/allocations/new/feedback/", query)
    assert response.status_code == 200
    return response.content.decode()


def test_choosing_a_flavor_shows_its_modes_purpose_caveats_and_minimums(world: World, login: Login) -> None:
    Flavor.objects.filter(pk=world.mig.pk).update(min_cuda_version="11.0", min_driver_version="450.80.02")
    mig = section(feedback(world, login, world.mig), "feedback-sharing")
    assert "Sharing: MIG instance" in mig
    assert GUIDES["mig"].purpose in mig and GUIDES["mig"].memory_isolation in mig
    assert "Node minimums driver ≥ 450.80.02 and CUDA ≥ 11.0" in mig

    mps = section(feedback(world, login, world.mps), "feedback-sharing")
    assert "Sharing: CUDA MPS replica" in mps and "Throughput" in mps
    assert "a fatal GPU fault in one client is reported to every client on that GPU" in mps
    assert "Node minimums none" in mps
    for caveat in GUIDES["mps"].caveats:
        assert caveat in mps


def test_the_guidance_shows_before_the_quantity_is_filled_in(world: World, login: Login) -> None:
    page = feedback(world, login, world.a100, quantity="")
    assert "Sharing: Whole GPU" in section(page, "feedback-sharing")
    assert "Choose a flavor and a quantity" in page


def test_no_flavor_chosen_shows_no_guidance(world: World, login: Login) -> None:
    response = login("nlp_member").get("/allocations/new/feedback/", {"project": world.llm.pk, "quantity": 1})
    assert 'id="feedback-sharing"' not in response.content.decode()


def test_the_feedback_says_which_nodes_fall_short_of_the_minimums(world: World, login: Login) -> None:
    Flavor.objects.filter(pk=world.a100.pk).update(min_driver_version="535")
    Node.objects.filter(name="a100-0").update(driver_version="470.57.02")
    page = text_of(feedback(world, login, world.a100)).replace(" :", ":")
    assert ("✗ Does not fit on cluster test-cluster: no node of cluster test-cluster that could offer whole "
            "NVIDIA-A100-SXM4-80GB GPUs reports driver ≥ 535, the flavor's minimum (a100-0: driver 470.57.02; "
            "a100-1: driver unknown)") in page


def flavor_options(page: str) -> list[str]:
    select = re.search(r'<select name="flavor".*?</select>', page, re.S)
    assert select is not None
    return re.findall(r'<option value="(\d+)"', select.group(0))


def test_the_request_form_offers_only_flavors_some_node_meets_the_minimums_of(world: World, login: Login) -> None:
    Flavor.objects.filter(pk=world.h100.pk).update(min_cuda_version="12.0")
    assert str(world.h100.pk) not in flavor_options(login("vision_member").get("/allocations/new/").content.decode())
    Node.objects.filter(name="h100-0").update(cuda_version="12.4")
    assert str(world.h100.pk) in flavor_options(login("vision_member").get("/allocations/new/").content.decode())


def test_the_catalogue_lists_every_mode_and_each_flavors_minimums(world: World, login: Login) -> None:
    Flavor.objects.filter(pk=world.mig.pk).update(min_cuda_version="11.0")
    page = login("platform").get("/platform/catalogue/").content.decode()
    modes = section(page.replace('<section class="card" aria-labelledby="modes-title" id="sharing-modes">',
                                 '<section id="sharing-modes">'), "sharing-modes")
    for guide in GUIDES.values():
        assert guide.name in modes and guide.purpose in modes
    assert "Not managed by the portal: " + GUIDES["nvidia-vgpu"].unmanaged_reason in modes
    row = re.search(r"<tr><td>A100 1g\.10gb.*?</tr>", page, re.S)
    assert row is not None and "CUDA ≥ 11.0" in text_of(row.group(0))
