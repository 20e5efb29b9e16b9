"""Browser tests: Debian's Chromium, headless, driven by Playwright against pytest-django's live server.

Every test saves a screenshot of each page it visits under ``test-artifacts/screenshots/<test>/``
(and one named ``failure`` when it fails). Never a downloaded browser build: the executable is
the system's ``/usr/bin/chromium`` (``make browser`` installs it).
"""

from __future__ import annotations

import os
import re
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings
from playwright.sync_api import Browser, Page, expect, sync_playwright
from pytest_django.live_server_helper import LiveServer

from tests.conftest import World, build_world

CHROMIUM = Path(os.environ.get("GPUPORTAL_CHROMIUM", "/usr/bin/chromium"))
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-dev-shm-usage"]
SECURITY_HEADERS = "frontend.middleware.PortalSecurityHeadersMiddleware"

expect.set_options(timeout=15_000)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        item.stash[_FAILED] = report.failed


_FAILED = pytest.StashKey[bool]()


@pytest.fixture(scope="package", autouse=True)
def _portal_as_deployed() -> Iterator[None]:
    """Serve the pages with the security headers middleware, so the tests prove that the pages and
    HTMX work under the strict Content-Security-Policy. Must apply before the live server starts
    (only these tests use it); other tests keep the configured middleware."""
    middleware = list(settings.MIDDLEWARE)
    if SECURITY_HEADERS not in middleware:
        middleware.insert(middleware.index("django.middleware.security.SecurityMiddleware") + 1, SECURITY_HEADERS)
    with override_settings(MIDDLEWARE=middleware):
        yield


@pytest.fixture(scope="package")
def live_server(request: pytest.FixtureRequest, _portal_as_deployed: None) -> Iterator[LiveServer]:
    """pytest-django's live server, started for this package only and after the middleware
    override (a session-scoped server would start first and load the configured middleware)."""
    address = request.config.getvalue("liveserver") or os.getenv("DJANGO_LIVE_TEST_SERVER_ADDRESS") or "localhost"
    server = LiveServer(address)
    yield server
    server.stop()


@pytest.fixture(scope="package")
def browser(_portal_as_deployed: None) -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (make browser installs Debian's)")
    # Playwright's sync API keeps an event loop in this thread while the browser is open; the tests'
    # own ORM calls stay synchronous. Allowed for this package only, and restored after it.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            launched = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
            yield launched
            launched.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@dataclass
class Portal:
    """One browser tab on the live server, with the World's personas and a screenshot log."""

    page: Page
    world: World
    folder: Path
    shots: list[Path] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)

    def shot(self, name: str) -> Path:
        path = self.folder / f"{len(self.shots) + 1:02d}-{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        self.shots.append(path)
        return path

    def login(self, persona: str) -> None:
        self.page.goto("/login/")
        self.page.get_by_label("Username").fill(persona)
        self.page.get_by_label("Password").fill(f"pw-{persona}")
        self.page.get_by_role("button", name="Log in").click()
        expect(self.page.get_by_role("heading", name="Dashboard", level=1)).to_be_visible()

    def logout(self) -> None:
        self.open_menu()
        self.page.get_by_role("button", name=re.compile(r"^Log out")).click()
        expect(self.page.get_by_role("heading", name="Log in")).to_be_visible()

    def nav(self, label: str) -> None:
        self.open_menu()
        self.page.get_by_role("navigation", name="Main").get_by_role("link", name=label, exact=True).click()

    def open_menu(self) -> None:
        """On a phone's width the navigation is folded under its Menu button: open it. The page's
        script folds it on DOMContentLoaded: wait for that before looking."""
        self.page.wait_for_load_state("load")
        menu = self.page.get_by_role("button", name="Menu", exact=True)
        if menu.is_visible() and menu.get_attribute("aria-expanded") == "false":
            menu.click()


@pytest.fixture
def portal(browser: Browser, live_server: LiveServer, request: pytest.FixtureRequest) -> Iterator[Portal]:
    folder = ARTIFACTS / re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*"):
        old.unlink()
    context = browser.new_context(base_url=live_server.url, viewport={"width": 1280, "height": 900},
                                  accept_downloads=True)
    page = context.new_page()
    portal = Portal(page=page, world=build_world(), folder=folder)
    page.on("console", lambda message: portal.console_errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: portal.console_errors.append(str(error)))
    yield portal
    if request.node.stash.get(_FAILED, False):
        page.screenshot(path=str(folder / "failure.png"), full_page=True)
    context.close()
