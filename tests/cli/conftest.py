"""The command-line client against live portals: pytest-django's live server (a real HTTP server
in a thread, on the test database) with the personas of ``tests.conftest.build_world`` and their
tokens, and the demo portal (``tests.cli.demo_server``: ``make run``'s set-up in a process of its
own); the client runs in-process through Click's runner with its own configuration folder."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from click.testing import CliRunner, Result
from django.db import connections
from pytest_django.live_server_helper import LiveServer

from audit.models import AuditCheckpoint
from cli.tree import root
from tests.cli.demo_server import PASSWORD, DemoServer, demo_server
from tests.conftest import World, build_world


@dataclass
class Portal:
    url: str
    world: World
    tokens: dict[str, str]

    def api(self, persona: str, method: str, path: str, **kwargs: Any) -> requests.Response:
        """A plain API call as ``persona``, outside the client (the other side of a test)."""
        return requests.request(method, f"{self.url}/api/v1/{path}", timeout=30,
                                headers={"Authorization": f"Token {self.tokens[persona]}"}, **kwargs)


@pytest.fixture
def portal(live_server: LiveServer, transactional_db: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[Portal]:
    from tenants.auth import auth_token_issue

    # The live server answers each request on a new thread: with persistent connections each thread
    # would leave its own open, and the test database could not be dropped at the end.
    monkeypatch.setitem(connections.settings["default"], "CONN_MAX_AGE", 0)

    world = build_world()
    tokens = {name: auth_token_issue(user=user).key for name, user in world.users.items()}
    checkpoints = AuditCheckpoint.objects.count()
    yield Portal(url=live_server.url, world=world, tokens=tokens)
    # The audit log outlives the flush: a checkpoint signed here would be one that later tests'
    # keys cannot verify. Audit exports are tested on the demo portal (its own database).
    assert AuditCheckpoint.objects.count() == checkpoints


@pytest.fixture(scope="session")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoServer]:
    with demo_server(tmp_path_factory.mktemp("demo-portal")) as server:
        yield server


class Cli:
    """Runs ``gpuportal ARGS`` in-process with a private configuration folder and no GPUPORTAL_*
    variables but those a test passes."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.env: dict[str, str | None] = {"XDG_CONFIG_HOME": str(home), "GPUPORTAL_CONFIG": None}
        for name in ("GPUPORTAL_URL", "GPUPORTAL_TOKEN", "GPUPORTAL_CONTEXT"):
            self.env[name] = None

    @property
    def config_file(self) -> Path:
        return self.home / "gpuportal" / "config.yaml"

    def __call__(self, *args: str, input: str | None = None, env: dict[str, str] | None = None) -> Result:
        runner = CliRunner()
        return runner.invoke(root, list(args), input=input, env={**self.env, **(env or {})}, prog_name="gpuportal",
                             catch_exceptions=False)

    def demo_login(self, demo: DemoServer, username: str) -> None:
        result = self("login", "--url", demo.url, "--username", username, "--password-stdin", input=PASSWORD + "\n")
        assert result.exit_code == 0, result.stderr

    def login(self, portal: Portal, persona: str, *extra: str) -> Result:
        result = self("login", "--url", portal.url, "--token-stdin", *extra, input=portal.tokens[persona] + "\n")
        assert result.exit_code == 0, result.stderr
        return result


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[Cli]:
    home = tmp_path / "config-home"
    home.mkdir()
    yield Cli(home)
