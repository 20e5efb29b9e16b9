"""docker-compose.yml as shipped: web, worker and beat have health checks that work, every secret
it mounts is made by `make compose-secrets` with safe permissions (and never overwritten), and its
plain-HTTP default keeps the session and CSRF cookies usable. (`docker compose config` needs a
Docker engine; these tests read the file itself.)"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from audit.integrity.keys import signing_key_parse
from gpuportal import healthcheck

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SCRIPT = ROOT / "scripts" / "compose-secrets.sh"
DEFAULT = re.compile(r"\$\{(?P<name>[A-Z0-9_]+):-(?P<default>[^}]*)\}")


def run_script(folder: Path) -> str:
    done = subprocess.run([str(SCRIPT), str(folder)], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_web_worker_and_beat_have_health_checks_and_the_stateful_services_too() -> None:
    services = COMPOSE["services"]
    for name in ("postgres", "redis", "web", "worker", "beat"):
        check = services[name]["healthcheck"]
        assert check["test"] and check["interval"] and check["retries"] >= 3, name
    assert services["web"]["healthcheck"]["test"] == ["CMD", "python", "-m", "gpuportal.healthcheck"]
    worker, beat = (" ".join(services[name]["healthcheck"]["test"]) for name in ("worker", "beat"))
    assert "inspect ping --destination celery@$$HOSTNAME" in worker
    assert "inspect ping --destination celerybeat@$$HOSTNAME" in beat


def test_every_secret_the_file_mounts_and_every_password_it_reads_is_made_by_the_script(tmp_path: Path) -> None:
    run_script(tmp_path)
    for name, secret in COMPOSE["secrets"].items():
        made = tmp_path / Path(secret["file"])
        assert made.is_file() and made.read_text().strip(), name
    mounted = {name for service in COMPOSE["services"].values() for name in service.get("secrets", [])}
    assert mounted == set(COMPOSE["secrets"])
    text = (ROOT / "docker-compose.yml").read_text()
    passwords = {match["name"] for match in DEFAULT.finditer(text) if "PASSWORD" in match["name"]}
    written = dict(line.split("=", 1) for line in (tmp_path / ".env").read_text().splitlines() if "=" in line)
    assert passwords == {"POSTGRES_PASSWORD", "GPUPORTAL_APP_DB_PASSWORD"} and passwords <= set(written)
    assert all(re.fullmatch(r"[0-9a-f]{48}", written[name]) for name in passwords)  # safe in a URL and in SQL


def test_the_script_makes_usable_keys_with_safe_permissions_and_never_overwrites_one(tmp_path: Path) -> None:
    first = run_script(tmp_path)
    assert first.count("created") == 3
    secrets = tmp_path / "secrets"
    key, signing = secrets / "gpuportal_secret_key", secrets / "gpuportal_audit_signing_key"
    assert len(key.read_text().strip()) >= 32  # settings refuse a shorter one
    assert signing_key_parse("gpuportal/audit", signing.read_text()).sign(b"checkpoint")
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o700  # nobody else on the host reaches the files
    assert stat.S_IMODE((tmp_path / ".env").stat().st_mode) == 0o600
    for path in (key, signing):
        assert not stat.S_IMODE(path.stat().st_mode) & (stat.S_IWGRP | stat.S_IWOTH)
    before = {path: path.read_bytes() for path in (key, signing, tmp_path / ".env")}
    again = run_script(tmp_path)
    assert again.count("kept") == 3 and "created" not in again
    assert {path: path.read_bytes() for path in before} == before


def compose_environment(tmp_path: Path, **overrides: str) -> dict[str, str]:
    """The web service's environment, ``${VAR:-default}`` resolved to its default, run on SQLite."""
    run_script(tmp_path)
    (tmp_path / "metrics").mkdir()  # gunicorn makes it when it starts (gpuportal/gunicorn_conf.py)
    service = COMPOSE["services"]["web"]
    resolved = {key: DEFAULT.sub(lambda match: match["default"], str(value)) for key, value in service["environment"].items()}
    resolved.update({
        "GPUPORTAL_SECRET_KEY_FILE": str(tmp_path / "secrets" / "gpuportal_secret_key"),
        "GPUPORTAL_AUDIT_SIGNING_KEY_FILE": str(tmp_path / "secrets" / "gpuportal_audit_signing_key"),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "GPUPORTAL_VAR_DIR": str(tmp_path), "GPUPORTAL_AUDIT_CHECKPOINT_DIR": str(tmp_path / "checkpoints"),
        "GPUPORTAL_MANIFESTS_DIR": str(tmp_path / "manifests"), "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"),
        "CELERY_BROKER_URL": "", "GPUPORTAL_CACHE_URL": "",
    })
    resolved.update(overrides)
    keep = {key: value for key, value in os.environ.items() if not key.startswith(("GPUPORTAL_", "DATABASE_URL", "CELERY_"))}
    return {**keep, **resolved, "DJANGO_SETTINGS_MODULE": "gpuportal.settings"}


CSRF_COOKIE = """
import django
django.setup()
from django.test import Client
response = Client(HTTP_HOST="localhost").get("/login/")
cookie = response.cookies["csrftoken"]
print(response.status_code, "secure" if cookie["secure"] else "plain")
"""


@pytest.mark.parametrize(("overrides", "expected"), [({}, "200 plain"), ({"GPUPORTAL_SECURE_COOKIES": "true"}, "200 secure")])
def test_the_plain_http_default_sends_cookies_a_browser_keeps_and_tls_can_ask_for_secure_ones(
    tmp_path: Path, overrides: dict[str, str], expected: str
) -> None:
    environment = compose_environment(tmp_path, **overrides)
    assert environment["GPUPORTAL_DEBUG"] == "false"  # production settings, not the debug shortcut
    done = subprocess.run([sys.executable, "-c", CSRF_COOKIE], cwd=ROOT, env=environment, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == expected


class Portal(BaseHTTPRequestHandler):
    status = 200
    hosts: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - the http.server interface
        Portal.hosts.append(self.headers["Host"])
        body = b"ok\ndatabase: ok\n" if Portal.status == 200 else b"unavailable\ndatabase: unreachable\n"
        self.send_response(Portal.status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def portal() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Portal)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/readyz"
    server.shutdown()
    server.server_close()


def test_the_web_check_passes_on_200_fails_on_503_or_silence_and_names_an_allowed_host(
    portal: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GPUPORTAL_ALLOWED_HOSTS", ".gpus.example.org,localhost")
    Portal.status, Portal.hosts = 200, []
    assert healthcheck.main([portal]) == 0
    Portal.status = 503
    assert healthcheck.main([portal]) == 1
    assert "503: unavailable" in capsys.readouterr().out
    assert Portal.hosts == ["gpus.example.org", "gpus.example.org"]
    assert healthcheck.main(["http://127.0.0.1:9/readyz"]) == 1
    assert healthcheck.probe_host(None) == healthcheck.probe_host("*") == "localhost"
