"""The README's screenshots (docs/screenshots/), at a desktop's width and a phone's.

``make screenshots`` runs this with GPUPORTAL_SCREENSHOTS naming the folder to write; without it the
test is skipped, so ``make test`` never rewrites the images. The pages are the test World's: a
researcher with grants and a request, an admin deciding, a platform admin's GPU map.
"""

from __future__ import annotations

import datetime
import os
import re
from pathlib import Path

import pytest
from django.utils import timezone
from playwright.sync_api import Page, ViewportSize, expect

from allocations.grants import services
from tests.browser.conftest import Portal
from tests.conftest import World

OUT = os.environ.get("GPUPORTAL_SCREENSHOTS", "")
DESKTOP = ViewportSize(width=1280, height=900)
PHONE = ViewportSize(width=390, height=844)
TALLEST = {1280: 1400, 390: 2000}  # px: a long page is cut there, to keep the images small

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not OUT, reason="GPUPORTAL_SCREENSHOTS names no folder (make screenshots)"),
]


def save(page: Page, name: str) -> None:
    """One image of the page at each width: ``portal-<name>.png`` and ``phone-<name>.png``."""
    folder = Path(OUT)
    folder.mkdir(parents=True, exist_ok=True)
    for size, prefix in ((DESKTOP, "portal"), (PHONE, "phone")):
        page.set_viewport_size(size)
        page.wait_for_load_state("networkidle")
        height = min(page.evaluate("document.documentElement.scrollHeight"), TALLEST[size["width"]])
        page.screenshot(path=str(folder / f"{prefix}-{name}.png"), full_page=True,
                        clip={"x": 0, "y": 0, "width": size["width"], "height": height})
    page.set_viewport_size(DESKTOP)


def seed(world: World) -> int:
    """Two active grants (one on each department, so the GPU map shows both colours) and a
    request waiting for the NLP admin; answers the grant of the researcher."""
    start = timezone.now()
    ids = []
    for persona, project, flavor, quantity, admin in (
        ("nlp_member", world.llm, world.a100, 2, "nlp_admin"),
        ("vision_member", world.seg, world.h100, 3, "vision_admin"),
    ):
        requested = services.allocation_request(
            actor=world.users[persona], project=project, flavor=flavor, quantity=quantity,
            priority_class=world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=14),
            justification="Training runs for the quarter's models",
        )
        ids.append(services.allocation_approve(actor=world.users[admin], allocation_id=requested.pk).pk)
    services.allocation_request(
        actor=world.users["nlp_member"], project=world.llm, flavor=world.mig, quantity=3,
        priority_class=world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=7),
        justification="Distilling the speech model: three 1g slices for a week of small experiments",
    )
    return ids[0]


def test_the_readme_screenshots(portal: Portal) -> None:
    page, world = portal.page, portal.world
    page.set_viewport_size(DESKTOP)
    grant = seed(world)

    portal.login("nlp_member")
    save(page, "dashboard")
    page.goto(f"/allocations/{grant}/")
    expect(page.get_by_role("heading", name=f"Allocation #{grant}", level=1)).to_be_visible()
    save(page, "allocation")
    page.goto("/allocations/new/")
    page.get_by_label("Project").select_option(str(world.llm.pk))
    page.get_by_label("Flavor").select_option(str(world.a100.pk))
    page.get_by_label("Quantity").fill("2")
    page.get_by_label("Justification").fill("Fine-tuning a 7B model for the speech team")
    expect(page.locator("#feedback-verdict")).to_have_text("This request fits today.")
    save(page, "request")
    portal.logout()

    portal.login("nlp_admin")
    page.goto("/approvals/")
    expect(page.get_by_label(re.compile(r"^Select request #\d+$"))).to_have_count(1)
    save(page, "approvals")
    portal.logout()

    portal.login("platform")
    page.goto(f"/platform/clusters/{world.cluster.pk}/")
    save(page, "gpu-map")
    page.set_viewport_size(PHONE)
    portal.open_menu()
    page.screenshot(path=str(Path(OUT) / "phone-menu.png"))
