"""The sign-in lockout (tenants/signin_lockout.py, docs/security.md): one policy for every way a
password is presented, keyed on the username and on the client address seen through the trusted
proxies, with audited locks and an audited unlock."""

from __future__ import annotations

import io
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth import authenticate
from django.contrib.auth.models import User
from django.core.cache import cache, caches
from django.core.cache.backends.locmem import LocMemCache
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from rest_framework.test import APIClient

from audit.models import AuditEvent
from kernel.client_address import address_through_proxies
from kernel.env import env_cache
from tests.conftest import World

pytestmark = pytest.mark.django_db

TOKEN = "/api/v1/auth/token/"
UNLOCK = "/api/v1/auth/unlock/"
PER_USERNAME = settings.GPUPORTAL_SIGNIN_FAILURES_PER_USERNAME
PER_ADDRESS = settings.GPUPORTAL_SIGNIN_FAILURES_PER_ADDRESS


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    cache.clear()
    yield
    cache.clear()


class Clock:
    """``time.time`` (read by the lockout and by the memory cache's expiry) under the test's control."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = time.time()
        monkeypatch.setattr(time, "time", lambda: self.now)

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    if not isinstance(caches["default"], LocMemCache):
        pytest.skip("the clock moves the memory cache's expiry, not a Redis server's")
    return Clock(monkeypatch)


def token(username: str, password: str, **headers: Any) -> Any:
    return APIClient().post(TOKEN, {"username": username, "password": password}, format="json", **headers)


def portal(username: str, password: str, **headers: Any) -> int:
    return int(Client(**headers).post("/login/", {"username": username, "password": password}).status_code)


def events(action: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action).order_by("seq"))


# ----------------------------------------------------------------------------- one lock, every door


def test_200_guesses_with_varying_forwarded_for_do_not_reach_the_right_password(world: World) -> None:
    answers = [
        token("nlp_member", f"guess-{i}", HTTP_X_FORWARDED_FOR=f"198.51.{i // 250}.{i % 250}").status_code
        for i in range(200)
    ]
    assert answers == [401] * PER_USERNAME + [429] * (200 - PER_USERNAME)
    right = token("nlp_member", "pw-nlp_member", HTTP_X_FORWARDED_FOR="192.0.2.200")
    assert right.status_code == 429 and right.json()["error"]["code"] == "throttled"
    assert 0 < int(right["Retry-After"]) <= settings.GPUPORTAL_SIGNIN_LOCK_SECONDS
    assert events("auth.token_issued") == []
    # The lock is audited once; every refused attempt is recorded as a throttled failure.
    (locked,) = events("auth.locked_out")
    assert locked.details["scope"] == "username" and locked.details["username"] == "nlp_member"
    assert locked.details["failures"] == PER_USERNAME and locked.outcome == "denied"
    reasons = [event.details.get("reason") for event in events("auth.login_failed")]
    assert reasons == ["bad credentials"] * PER_USERNAME + ["throttled"] * (201 - PER_USERNAME)
    assert portal("nlp_member", "pw-nlp_member") == 429


def test_a_user_locked_out_of_the_portal_gets_no_token(world: World) -> None:
    for _ in range(PER_USERNAME):
        assert portal("NLP_Member", "wrong") == 200
    assert portal("nlp_member", "pw-nlp_member") == 429
    response = token("nlp_member", "pw-nlp_member")
    assert response.status_code == 429 and response.json()["error"]["code"] == "throttled"
    assert "Retry-After" in response
    assert events("auth.token_issued") == [] and events("auth.login") == []
    # Another user from another address is not affected.
    assert token("nlp_admin", "pw-nlp_admin", REMOTE_ADDR="192.0.2.9").status_code == 200


def test_the_admin_login_and_any_other_authenticate_call_meet_the_same_lock(world: World) -> None:
    User.objects.create_user("ops", password="pw-ops", is_staff=True, is_superuser=True)
    admin = Client()
    for _ in range(PER_USERNAME):
        page = admin.post("/admin/login/", {"username": "ops", "password": "wrong", "next": "/admin/"})
        assert page.status_code == 200
    refused = admin.post("/admin/login/", {"username": "ops", "password": "pw-ops", "next": "/admin/"})
    assert refused.status_code == 200 and "Too many failed attempts" in refused.content.decode()
    assert admin.get("/admin/").status_code == 302  # still not signed in
    assert token("ops", "pw-ops").status_code == 429
    assert authenticate(None, username="ops", password="pw-ops") is None  # the gate backend
    assert events("auth.locked_out")[0].details["username"] == "ops"
    assert {event.details["via"] for event in events("auth.login_failed")} == {"admin", "api_token"}
    # A direct authenticate() outside the portal's forms still counts towards the lock.
    for _ in range(PER_USERNAME):
        assert authenticate(None, username="nlp_admin", password="wrong") is None
    assert token("nlp_admin", "pw-nlp_admin").status_code == 429


# ------------------------------------------------------------------------- the client's address


@pytest.mark.parametrize(
    ("proxies", "remote", "forwarded", "client"),
    [
        (0, "10.0.0.1", "203.0.113.7", "10.0.0.1"),  # no proxy trusted: the header is ignored
        (0, "10.0.0.1", None, "10.0.0.1"),
        (1, "10.0.0.1", "203.0.113.7", "203.0.113.7"),
        (1, "10.0.0.1", "6.6.6.6, 203.0.113.7", "203.0.113.7"),  # the client's own entry is never read
        (2, "10.0.0.2", "6.6.6.6, 203.0.113.7, 10.0.0.1", "203.0.113.7"),
        (2, "10.0.0.2", "203.0.113.7", "10.0.0.2"),  # shorter than the proxies: the peer
        (1, "10.0.0.1", None, "10.0.0.1"),
        (1, "10.0.0.1", "", "10.0.0.1"),
        (1, "10.0.0.1", "6.6.6.6, unknown", "10.0.0.1"),  # not an address: the peer
        (1, "10.0.0.1", "6.6.6.6, 203.0.113.7:51234", "203.0.113.7"),
        (1, "10.0.0.1", "[2001:DB8::0001]:443", "2001:db8::1"),
        (1, "10.0.0.1", "::ffff:203.0.113.7", "203.0.113.7"),
        (0, None, "203.0.113.7", None),
    ],
)
def test_the_client_address_is_read_through_the_trusted_proxies_only(
    proxies: int, remote: str | None, forwarded: str | None, client: str | None
) -> None:
    assert address_through_proxies(remote_addr=remote, forwarded_for=forwarded, trusted_proxies=proxies) == client


def test_without_trusted_proxies_a_spoofed_header_does_not_spread_guesses_over_addresses(world: World) -> None:
    for i in range(PER_ADDRESS):  # a different username each time: only the address count can lock
        assert token(f"user{i}", "guess", REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR=f"198.51.100.{i}").status_code == 401
    refused = token("nlp_member", "pw-nlp_member", REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR="198.51.100.250")
    assert refused.status_code == 429
    (locked,) = events("auth.locked_out")
    assert locked.details["scope"] == "address" and locked.details["address"] == "10.0.0.1"
    assert {event.source_ip for event in events("auth.login_failed")} == {"10.0.0.1"}  # not the spoofed header
    assert token("nlp_member", "pw-nlp_member", REMOTE_ADDR="10.0.0.2").status_code == 200


def test_behind_one_trusted_proxy_the_proxys_entry_is_the_address(world: World, settings: Any) -> None:
    settings.GPUPORTAL_TRUSTED_PROXIES = 1
    for i in range(PER_ADDRESS):  # the client varies what it sends; the proxy appends what it saw
        answer = token(f"user{i}", "guess", REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR=f"198.51.100.{i}, 203.0.113.7")
        assert answer.status_code == 401
    assert token("nlp_member", "pw-nlp_member", REMOTE_ADDR="10.0.0.1",
                 HTTP_X_FORWARDED_FOR="198.51.100.250, 203.0.113.7").status_code == 429
    (locked,) = events("auth.locked_out")
    assert locked.details["address"] == "203.0.113.7"
    assert {event.source_ip for event in events("auth.login_failed")} == {"203.0.113.7"}
    # Another client behind the same proxy is not locked.
    assert token("nlp_member", "pw-nlp_member", REMOTE_ADDR="10.0.0.1",
                 HTTP_X_FORWARDED_FOR="203.0.113.8").status_code == 200


def test_an_ipv6_client_counts_for_its_64(world: World) -> None:
    for i in range(PER_ADDRESS):
        assert token(f"user{i}", "guess", REMOTE_ADDR=f"2001:db8:0:1::{i + 1:x}").status_code == 401
    assert token("nlp_member", "pw-nlp_member", REMOTE_ADDR="2001:db8:0:1:ffff::1").status_code == 429
    assert events("auth.locked_out")[0].details["address"] == "2001:db8:0:1::/64"
    assert token("nlp_member", "pw-nlp_member", REMOTE_ADDR="2001:db8:0:2::1").status_code == 200


# ------------------------------------------------------------------------------------ time


def test_failures_outside_the_window_are_forgotten(world: World, clock: Clock) -> None:
    for _ in range(PER_USERNAME - 1):
        assert token("nlp_member", "wrong").status_code == 401
    clock.advance(settings.GPUPORTAL_SIGNIN_WINDOW_SECONDS + 1)
    for _ in range(PER_USERNAME - 1):
        assert token("nlp_member", "wrong").status_code == 401
    assert token("nlp_member", "pw-nlp_member").status_code == 200
    assert events("auth.locked_out") == []


def test_a_lock_ends_after_the_lock_duration_and_says_how_long_it_has_left(world: World, clock: Clock) -> None:
    for _ in range(PER_USERNAME):
        token("nlp_member", "wrong")
    clock.advance(60)
    refused = token("nlp_member", "pw-nlp_member")
    assert refused.status_code == 429
    assert int(refused["Retry-After"]) == settings.GPUPORTAL_SIGNIN_LOCK_SECONDS - 60
    page = Client().post("/login/", {"username": "nlp_member", "password": "pw-nlp_member"})
    minutes = -(-(settings.GPUPORTAL_SIGNIN_LOCK_SECONDS - 60) // 60)
    assert page.status_code == 429 and f"Wait {minutes} minutes" in page.content.decode()
    clock.advance(settings.GPUPORTAL_SIGNIN_LOCK_SECONDS - 60 + 1)
    assert token("nlp_member", "pw-nlp_member").status_code == 200
    assert len(events("auth.locked_out")) == 1


def test_the_limits_come_from_the_settings(world: World, settings: Any) -> None:
    settings.GPUPORTAL_SIGNIN_FAILURES_PER_USERNAME = 2
    settings.GPUPORTAL_SIGNIN_LOCK_SECONDS = 120
    assert [token("nlp_member", "wrong").status_code for _ in range(3)] == [401, 401, 429]
    assert events("auth.locked_out")[0].details["lock_seconds"] == 120


# ------------------------------------------------------------------------------------ unlock


def lock(username: str) -> None:
    for _ in range(PER_USERNAME):
        token(username, "wrong")
    assert token(username, f"pw-{username}").status_code == 429


def test_a_platform_admin_lifts_a_lock_through_the_api(world: World) -> None:
    lock("nlp_member")
    assert world.client("nlp_admin").post(UNLOCK, {"username": "nlp_member"}, format="json").status_code == 403
    answer = world.client("platform").post(UNLOCK, {"username": "NLP_member"}, format="json")
    assert answer.status_code == 200 and answer.json() == {"username": "NLP_member", "was_locked": True}
    (unlocked,) = events("auth.unlocked")
    assert unlocked.actor_username == "platform"
    assert unlocked.details == {"scope": "username", "username": "nlp_member", "was_locked": True, "via": "api"}
    assert token("nlp_member", "pw-nlp_member").status_code == 200
    # The failures were forgotten too: a full allowance again.
    assert [token("nlp_member", "wrong").status_code for _ in range(PER_USERNAME)] == [401] * PER_USERNAME


@pytest.mark.parametrize("body", [{}, {"username": "a", "address": "192.0.2.1"}, {"address": "not-an-address"}])
def test_the_unlock_api_takes_a_username_or_an_address(world: World, body: dict[str, str]) -> None:
    assert world.client("platform").post(UNLOCK, body, format="json").status_code == 400
    assert events("auth.unlocked") == []


def test_manage_py_auth_unlock_lifts_a_username_or_an_address(world: World) -> None:
    lock("nlp_member")
    out = io.StringIO()
    call_command("auth_unlock", "nlp_member", "--actor", "platform", stdout=out)
    assert "lock lifted" in out.getvalue()
    assert token("nlp_member", "pw-nlp_member").status_code == 200
    for i in range(PER_ADDRESS):
        token(f"user{i}", "guess", REMOTE_ADDR="192.0.2.44")
    assert token("nlp_admin", "pw-nlp_admin", REMOTE_ADDR="192.0.2.44").status_code == 429
    call_command("auth_unlock", "--address", "192.0.2.44", stdout=io.StringIO())
    assert token("nlp_admin", "pw-nlp_admin", REMOTE_ADDR="192.0.2.44").status_code == 200
    by_user, by_address = events("auth.unlocked")
    assert by_user.actor_username == "platform" and by_user.details["username"] == "nlp_member"
    assert by_address.actor_username == "" and by_address.details["address"] == "192.0.2.44"
    assert by_address.details["was_locked"] is True and by_address.details["via"] == "manage.py auth_unlock"
    with pytest.raises(CommandError):
        call_command("auth_unlock", "--address", "nowhere")
    with pytest.raises(CommandError):
        call_command("auth_unlock")


# ------------------------------------------------------------------------------- the shared cache


def test_a_redis_cache_url_gives_the_redis_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("X_CACHE_URL", "redis://redis:6379/1")
    config = env_cache("X_CACHE_URL")
    assert config["BACKEND"] == "django.core.cache.backends.redis.RedisCache"
    assert config["LOCATION"] == "redis://redis:6379/1"
    monkeypatch.delenv("X_CACHE_URL")
    assert env_cache("X_CACHE_URL")["BACKEND"] == "django.core.cache.backends.locmem.LocMemCache"
    monkeypatch.setenv("X_CACHE_URL", "memcached://cache:11211")
    with pytest.raises(ImproperlyConfigured, match="X_CACHE_URL must be a redis"):
        env_cache("X_CACHE_URL")


def test_the_settings_take_the_cache_from_gpuportal_cache_url(tmp_path: Any) -> None:
    code = (
        "import django, os; os.environ['DJANGO_SETTINGS_MODULE'] = 'gpuportal.settings'; django.setup(); "
        "from django.conf import settings; from django.core.cache import caches; "
        "print(settings.CACHES['default']['LOCATION'], type(caches['default']).__name__)"
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "GPUPORTAL_DEBUG": "true", "GPUPORTAL_VAR_DIR": str(tmp_path),
           "GPUPORTAL_CACHE_URL": "redis://cache.example:6379/1"}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["redis://cache.example:6379/1", "RedisCache"]


@pytest.fixture
def redis_url(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A private redis-server as the default cache, for one test (skipped without one, failed where
    the run must prove it)."""
    if shutil.which("redis-server") is None:
        if os.environ.get("GPUPORTAL_REQUIRE_POSTGRES") == "1":
            pytest.fail("redis-server is missing (scripts/services.sh installs it)")
        pytest.skip("redis-server is missing")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no"], stdout=subprocess.DEVNULL)
    memory = settings.CACHES
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        url = f"redis://127.0.0.1:{port}/0"
        monkeypatch.setenv("X_CACHE_URL", url)
        settings.CACHES = {"default": env_cache("X_CACHE_URL")}  # as GPUPORTAL_CACHE_URL gives it
        yield url
    finally:
        settings.CACHES = memory
        server.kill()
        server.wait(timeout=10)


def test_a_lock_in_the_redis_cache_holds_in_every_process_and_ends_on_time(
    world: World, settings: Any, redis_url: str, tmp_path: Any
) -> None:
    lock("nlp_member")
    # Another process (another web worker) with the same cache sees the lock.
    code = (
        "import django, os; os.environ['DJANGO_SETTINGS_MODULE'] = 'gpuportal.settings'; django.setup(); "
        "from tenants.signin_lockout import signin_lock_find; "
        "lock = signin_lock_find(username='NLP_member', address=None); print(lock.scope, lock.subject)"
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "GPUPORTAL_DEBUG": "true", "GPUPORTAL_VAR_DIR": str(tmp_path),
           "GPUPORTAL_CACHE_URL": redis_url}
    other = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert other.returncode == 0, other.stderr
    assert other.stdout.split() == ["username", "nlp_member"]
    call_command("auth_unlock", "nlp_member", stdout=io.StringIO())
    assert token("nlp_member", "pw-nlp_member").status_code == 200
    settings.GPUPORTAL_SIGNIN_LOCK_SECONDS = 3
    lock("nlp_member")
    time.sleep(3.2)  # Redis expires the lock on its own clock
    assert token("nlp_member", "pw-nlp_member").status_code == 200
