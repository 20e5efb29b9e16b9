"""``Idempotency-Key`` on the API's POSTs (issue 35: a client that retried a slow create of a quota
window made duplicate windows): the same key and body answer the first answer again and create
nothing more, even from concurrent requests on PostgreSQL; another body under the key is a 409; a
malformed key is a 400 naming the header; keys are per user and forgotten after a day; an error is
never kept; an answer holding a secret shown once refuses the header (docs/api.md)."""

from __future__ import annotations

import datetime
import json
import re
import time
from typing import Any
from unittest import mock

import pytest
from django.urls import resolve
from django.utils import timezone
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer

from allocations.models import Quota, QuotaWindow
from allocations.windows import services as window_services
from kernel.clock import clock_advance, clock_now, clock_set
from kernel.idempotency.drf import REPLAYED_HEADER
from kernel.idempotency.models import IdempotencyKey, KeyState
from kernel.idempotency.store import (
    HEADER,
    IN_PROGRESS_LEASE,
    KEY_TTL,
    Claimed,
    KeyInProgress,
    KeyReused,
    idempotency_claim,
)
from tenants.models import PersonalAccessToken
from tests.conftest import World, requires_postgres
from tests.threads import all_at_once

WINDOWS = "/api/v1/quota-windows/"
POSTGRES: pytest.MarkDecorator = requires_postgres()


def window_body(world: World, *, limit_delta: str = "4", days_ahead: int = 0) -> dict[str, Any]:
    quota = Quota.objects.get(department=world.nlp, flavor__isnull=True)
    start = timezone.now() - datetime.timedelta(minutes=1) + datetime.timedelta(days=days_ahead)
    return {"quota": quota.pk, "kind": "temporary", "begins_at": start.isoformat(),
            "ends_at": (start + datetime.timedelta(days=1)).isoformat(), "limit_delta": limit_delta}


def post(world: World, body: dict[str, Any], key: str | None, persona: str = "nlp_admin", path: str = WINDOWS) -> Any:
    headers = {HEADER: key} if key is not None else {}
    return world.client(persona).post(path, body, format="json", headers=headers)


def listed(world: World, persona: str = "nlp_admin") -> list[dict[str, Any]]:
    response = world.client(persona).get(WINDOWS)
    assert response.status_code == 200, response.content
    results: list[dict[str, Any]] = response.json()["results"]
    return results


def refused(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.content
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] == code, error
    assert list(error["fields"]) == [HEADER], error
    return error


def test_a_retried_create_with_the_same_key_makes_one_window_and_answers_the_first_answer_again(world: World) -> None:
    body = window_body(world)
    first = post(world, body, "retry-7f3c")
    assert first.status_code == 201, first.content
    assert REPLAYED_HEADER not in first

    again = post(world, dict(reversed(list(body.items()))), "retry-7f3c")  # the same body, fields in another order
    assert again.status_code == 201
    assert again.content == first.content
    assert again[REPLAYED_HEADER] == "true"
    assert again["Content-Type"] == first["Content-Type"]

    assert [window["id"] for window in listed(world)] == [first.json()["id"]]
    assert QuotaWindow.objects.count() == 1


def test_without_a_key_a_retry_creates_again(world: World) -> None:
    body = window_body(world)
    assert post(world, body, None).status_code == 201
    assert post(world, body, None).status_code == 201
    assert QuotaWindow.objects.count() == 2


def test_the_same_key_with_another_body_or_path_is_a_409_naming_the_header(world: World) -> None:
    assert post(world, window_body(world, limit_delta="4"), "k-1").status_code == 201
    error = refused(post(world, window_body(world, limit_delta="5"), "k-1"), 409, "idempotency_key_reused")
    assert HEADER in error["message"]
    project = {"slug": "nlp-other", "name": "Other", "department": world.nlp.pk}
    refused(post(world, project, "k-1", path="/api/v1/projects/"), 409, "idempotency_key_reused")
    assert QuotaWindow.objects.count() == 1


@pytest.mark.parametrize("key", ["", " ", "x" * 256, "two words", "caf\u00e9"])
def test_a_malformed_key_is_a_400_naming_the_header_and_creates_nothing(world: World, key: str) -> None:
    refused(post(world, window_body(world), key), 400, "invalid")
    assert QuotaWindow.objects.count() == 0
    assert IdempotencyKey.objects.count() == 0


def test_keys_are_per_user(world: World) -> None:
    body = window_body(world)
    assert post(world, body, "shared-key", persona="nlp_admin").status_code == 201
    other = post(world, body, "shared-key", persona="platform")
    assert other.status_code == 201 and REPLAYED_HEADER not in other
    assert QuotaWindow.objects.count() == 2


def test_an_error_is_not_kept_the_retry_runs_the_view_again(world: World) -> None:
    body = window_body(world)
    outsider = post(world, body, "k-err", persona="vision_admin")  # not an admin of nlp
    assert outsider.status_code in (400, 403, 404), outsider.content  # (its quota is out of reach)
    assert IdempotencyKey.objects.count() == 0

    bad = post(world, {**body, "limit_delta": "lots"}, "k-err")
    assert bad.status_code == 400 and REPLAYED_HEADER not in bad
    assert IdempotencyKey.objects.count() == 0
    fixed = post(world, body, "k-err")  # the same key, the body put right: runs
    assert fixed.status_code == 201 and REPLAYED_HEADER not in fixed
    assert QuotaWindow.objects.count() == 1


def test_a_server_error_releases_the_key(world: World) -> None:
    body = window_body(world)
    client = world.client("nlp_admin")
    client.raise_request_exception = False
    with mock.patch.object(window_services, "quota_window_create", side_effect=RuntimeError("boom")):
        failed = client.post(WINDOWS, body, format="json", headers={HEADER: "k-500"})
    assert failed.status_code == 500
    assert IdempotencyKey.objects.count() == 0
    assert post(world, body, "k-500").status_code == 201


def test_a_request_still_running_under_the_key_is_a_409_with_retry_after(world: World) -> None:
    body = window_body(world)
    user = world.users["nlp_admin"]
    IdempotencyKey.objects.create(user=user, key="k-busy", fingerprint="0" * 64, method="POST", path=WINDOWS,
                                  state=KeyState.IN_PROGRESS, claimed_at=clock_now(), expires_at=clock_now() + KEY_TTL)
    response = post(world, body, "k-busy")
    refused(response, 409, "idempotency_key_reused")  # another fingerprint
    with mock.patch("kernel.idempotency.drf.request_fingerprint", return_value="0" * 64):
        busy = post(world, body, "k-busy")
    refused(busy, 409, "idempotency_in_progress")
    assert busy["Retry-After"] == "1"
    assert QuotaWindow.objects.count() == 0


def test_a_key_is_forgotten_after_a_day_and_expired_keys_are_deleted(world: World) -> None:
    clock_set(timezone.now())
    body = window_body(world, days_ahead=3)
    assert post(world, body, "k-day").status_code == 201
    assert post(world, body, "k-old", persona="platform").status_code == 201
    clock_advance(KEY_TTL - datetime.timedelta(seconds=1))
    assert post(world, body, "k-day")[REPLAYED_HEADER] == "true"
    clock_advance(datetime.timedelta(seconds=2))
    again = post(world, {**body, "limit_delta": "5"}, "k-day")  # another body: no 409 now
    assert again.status_code == 201 and REPLAYED_HEADER not in again
    assert not IdempotencyKey.objects.filter(key="k-old").exists()  # purged by the claim above
    assert QuotaWindow.objects.count() == 3


def test_an_abandoned_claim_is_taken_over_after_its_lease(world: World) -> None:
    user_id = world.users["nlp_admin"].pk
    clock_set(timezone.now())
    claim = idempotency_claim(user_id=user_id, key="k", fingerprint="f", method="POST", path="/p")
    assert isinstance(claim, Claimed)
    with pytest.raises(KeyInProgress):
        idempotency_claim(user_id=user_id, key="k", fingerprint="f", method="POST", path="/p")
    with pytest.raises(KeyReused):
        idempotency_claim(user_id=user_id, key="k", fingerprint="g", method="POST", path="/p")
    clock_advance(IN_PROGRESS_LEASE + datetime.timedelta(seconds=1))
    taken = idempotency_claim(user_id=user_id, key="k", fingerprint="f", method="POST", path="/p")
    assert isinstance(taken, Claimed) and taken.key_id == claim.key_id
    assert IdempotencyKey.objects.count() == 1


def test_an_answer_holding_a_secret_refuses_the_header(world: World) -> None:
    response = post(world, {"name": "ci"}, "k-token", path="/api/v1/auth/tokens/")
    refused(response, 400, "invalid")
    assert not PersonalAccessToken.objects.filter(name="ci").exists()
    token = world.client(None).post("/api/v1/auth/token/", {"username": "nlp_admin", "password": "pw-nlp_admin"},
                                    format="json", headers={HEADER: "k-login"})
    refused(token, 400, "invalid")


def test_every_post_answering_a_token_or_secret_refuses_the_header() -> None:
    """A new view that answers a secret shown once must say ``idempotency_replay = False``: keeping its
    answer to replay it would keep the secret. Read from the schema: a POST whose 2xx answer has a
    ``token`` or ``secret`` property."""
    generated = SchemaGenerator().get_schema(request=None, public=True)  # type: ignore[no-untyped-call]
    schema: dict[str, Any] = json.loads(OpenApiJsonRenderer().render(generated))
    components = schema["components"]["schemas"]
    answering, leaking = [], []
    for path, item in schema["paths"].items():
        for status, answer in item.get("post", {}).get("responses", {}).items():
            ref = answer.get("content", {}).get("application/json", {}).get("schema", {}).get("$ref", "")
            properties = components.get(ref.rsplit("/", 1)[-1], {}).get("properties", {})
            if 200 <= int(status) < 300 and {"token", "secret"} & set(properties):
                view = resolve(re.sub(r"\{[^}]+\}", "1", path)).func.view_class  # type: ignore[attr-defined]
                answering.append(path)
                if view.idempotency_replay:
                    leaking.append(path)
    assert {"/api/v1/auth/tokens/", "/api/v1/auth/token/"} <= set(answering)  # the check sees them
    assert leaking == []


@POSTGRES
@pytest.mark.django_db(transaction=True)
def test_concurrent_retries_with_one_key_create_one_window_on_postgresql(world: World) -> None:
    body = window_body(world)
    create = window_services.quota_window_create

    def slow_create(**kwargs: Any) -> QuotaWindow:
        time.sleep(0.3)  # a slow create: the retries arrive while it runs
        return create(**kwargs)

    def retry() -> str:
        response = post(world, body, "race-1")
        return f"{response.status_code} {'replayed' if response.has_header(REPLAYED_HEADER) else ''}".strip()

    with mock.patch.object(window_services, "quota_window_create", side_effect=slow_create):
        outcomes = all_at_once([retry] * 8)
    assert outcomes["201"] == 1, outcomes
    assert set(outcomes) <= {"201", "201 replayed", "409"}, outcomes
    assert QuotaWindow.objects.count() == 1

    after = post(world, body, "race-1")
    assert after.status_code == 201 and after[REPLAYED_HEADER] == "true"
    assert QuotaWindow.objects.count() == 1


@POSTGRES
@pytest.mark.django_db(transaction=True)
def test_concurrent_creates_without_a_key_do_duplicate_the_check_above_is_not_vacuous(world: World) -> None:
    body = window_body(world)
    outcomes = all_at_once([lambda: str(post(world, body, None).status_code)] * 4)
    assert outcomes == {"201": 4}
    assert QuotaWindow.objects.count() == 4
