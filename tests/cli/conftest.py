"""The command-line client against a live portal: pytest-django's live server (a real HTTP server
in a thread, on the test database), the personas of ``tests.conftest.build_world`` with their
tokens, and the client run in-process through Click's runner with its own configuration folder."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from click.testing import CliRunner, Result
from pytest_django.live_server_helper import LiveServer

from audit.integrity.keys import SigningKey, signing_key_generate
from cli.tree import root
from tests.conftest import World, build_world

ORIGIN = "cli-tests/audit"
# One key for the session: the audit log outlives a transactional test's flush, and every
# checkpoint of it must verify with the key that publishes the next one.
SIGNING_KEY: SigningKey = signing_key_generate(ORIGIN)


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
def portal(live_server: LiveServer, transactional_db: None, settings: Any, tmp_path: Path) -> Portal:
    from tenants.auth import auth_token_issue

    settings.GPUPORTAL_AUDIT_ORIGIN = ORIGIN
    settings.GPUPORTAL_AUDIT_SIGNING_KEY = SIGNING_KEY.private_pem()
    settings.GPUPORTAL_AUDIT_CHECKPOINT_DIR = str(tmp_path / "checkpoints")
    world = build_world()
    tokens = {name: auth_token_issue(user=user).key for name, user in world.users.items()}
    return Portal(url=live_server.url, world=world, tokens=tokens)


@pytest.fixture
def verifier_key() -> str:
    return SIGNING_KEY.verifier.vkey()


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

    def login(self, portal: Portal, persona: str, *extra: str) -> Result:
        result = self("login", "--url", portal.url, "--token-stdin", *extra, input=portal.tokens[persona] + "\n")
        assert result.exit_code == 0, result.stderr
        return result


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[Cli]:
    home = tmp_path / "config-home"
    home.mkdir()
    yield Cli(home)
