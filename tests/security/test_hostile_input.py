"""Hostile input answers a 4xx naming what is wrong, after the permission check, and changes
nothing; an unhandled error under /api/ is the JSON envelope with a request id, never HTML.

- deep nesting: every JSON endpoint refuses a body nested beyond GPUPORTAL_API_JSON_MAX_DEPTH (400
  naming the body), where about a thousand levels used to raise RecursionError (a 500);
- NUL and lone surrogate characters: refused in every string of a body or query (400 naming the
  field), after the permission check, so no such string reaches the database (PostgreSQL refuses
  NUL in text: it used to be a DataError, a 500, through a project's ``members``);
- ids beyond 64 bits: a 400 naming the filter or body field (they used to overflow in the driver);
- the error contract: 500 and unknown /api/ URLs answer the JSON envelope with the request id of the
  X-Request-ID header; portal pages keep their HTML pages;
- discovery on a cluster whose configuration rules it out: 409, not 502.
"""

from __future__ import annotations

import datetime
import json
import logging
from typing import Any

import pytest
from django.db import connection
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone
from rest_framework.test import APIClient

from allocations.grants import services
from allocations.models import Allocation, Flavor, PriorityClass, Quota
from audit.models import AuditEvent
from clusters.models import Cluster, ClusterDriverKind
from telemetry.models import NodeToken
from tenants.models import Department, Project
from tests.conftest import World, requires_postgres

BEYOND_64_BITS = 2**63  # one more than the largest bigint
LIMIT = 64  # GPUPORTAL_API_JSON_MAX_DEPTH's default
ON_POSTGRES: pytest.MarkDecorator = requires_postgres()  # the PostgreSQL variants


def counts() -> dict[str, int]:
    """The rows a refused write must leave alone (a refusal may add its own audited denial)."""
    models: list[Any] = [Department, Project, Allocation, Flavor, PriorityClass, Quota, Cluster, NodeToken]
    rows = {model.__name__: model.objects.count() for model in models}
    return {**rows, "AuditEvent": AuditEvent.objects.exclude(outcome="denied").count()}


def nested(depth: int) -> str:
    """``depth`` levels of arrays: ``nested(2)`` is ``[[]]``."""
    return "[" * depth + "]" * depth


def pending(world: World) -> Allocation:
    start = timezone.now()
    return services.allocation_request(
        actor=world.users["nlp_member"], project=world.llm, flavor=world.a100, quantity=1,
        priority_class=world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=2), justification="x",
    )


def lenient(client: APIClient) -> APIClient:
    """A client that returns the 500 response instead of raising the view's exception."""
    client.raise_request_exception = False
    return client


class HostileParameters:
    """Records every query parameter holding a NUL or a lone surrogate that reaches the database
    driver (``with connection.execute_wrapper(seen := HostileParameters()):``)."""

    def __init__(self) -> None:
        self.found: list[str] = []

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        for param in (params or []) if not many else [value for row in params for value in row]:
            if isinstance(param, str) and any(char == "\x00" or 0xD800 <= ord(char) <= 0xDFFF for char in param):
                self.found.append(param)
        return execute(sql, params, many, context)


# ------------------------------------------------------------------------------ deep nesting

JSON_ENDPOINTS = [
    ("post", "/api/v1/departments/", "name"),
    ("post", "/api/v1/projects/", "members"),
    ("post", "/api/v1/allocations/", "justification"),
    ("post", "/api/v1/flavors/", "display_name"),
    ("post", "/api/v1/quotas/", "limit"),
    ("post", "/api/v1/clusters/", "display_name"),
    ("post", "/api/v1/node-tokens/", "description"),
    ("post", "/api/v1/priority-classes/", "description"),
]


@pytest.mark.parametrize("depth", [LIMIT + 1, 1000, 100_000])
@pytest.mark.parametrize(("method", "url", "field"), JSON_ENDPOINTS, ids=[url for _, url, _ in JSON_ENDPOINTS])
def test_a_body_nested_too_deep_is_a_400_naming_the_body_and_changes_nothing(
    world: World, method: str, url: str, field: str, depth: int
) -> None:
    before = counts()
    body = json.dumps({"project": world.llm.pk, "department": world.nlp.pk})[:-1] + f', "{field}": {nested(depth - 1)}}}'
    response = getattr(lenient(world.client("platform")), method)(url, data=body, content_type="application/json")
    assert response.status_code == 400, response.content[:300]
    error = response.json()["error"]
    assert error["code"] == "parse_error"
    assert list(error["fields"]) == ["body"]
    assert f"more than {LIMIT} levels" in error["message"]
    assert counts() == before


def test_an_action_body_nested_too_deep_is_a_400_too(world: World) -> None:
    allocation = pending(world)
    before = counts()
    response = lenient(world.client("nlp_admin")).post(
        f"/api/v1/allocations/{allocation.pk}/approve/", data=f'{{"comment": {nested(1000)}}}', content_type="application/json"
    )
    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {"body": [f"The request body nests arrays and objects more than {LIMIT} levels deep."]}
    assert counts() == before
    allocation.refresh_from_db()
    assert allocation.state == "pending"


def test_nesting_up_to_the_limit_reaches_validation_and_the_limit_is_a_setting(world: World, settings: Any) -> None:
    client = world.client("platform")
    body = f'{{"slug": "deep", "name": {nested(LIMIT - 1)}}}'  # the object is level one
    response = client.post("/api/v1/departments/", data=body, content_type="application/json")
    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == ["name"]
    settings.GPUPORTAL_API_JSON_MAX_DEPTH = 2
    response = client.post("/api/v1/departments/", data='{"slug": "x", "name": [[]]}', content_type="application/json")
    assert response.status_code == 400
    assert "more than 2 levels" in response.json()["error"]["message"]


# ----------------------------------------------------------------------- NUL and surrogates


def project_body(world: World, **overrides: Any) -> dict[str, Any]:
    return {"slug": "nlp-new", "name": "New", "department": world.nlp.pk, "members": ["nlp_member"], **overrides}


@pytest.mark.parametrize("persona", ["nlp_member", "auditor"])
def test_a_nul_in_members_from_someone_who_may_not_create_the_project_is_a_403_first(world: World, persona: str) -> None:
    before = counts()
    with connection.execute_wrapper(seen := HostileParameters()):
        response = world.client(persona).post("/api/v1/projects/", project_body(world, members=["a\x00b"]), format="json")
    assert response.status_code == 403, response.content
    assert response.json()["error"]["code"] == "permission_denied"
    assert seen.found == []
    assert counts() == before


@pytest.mark.parametrize("persona", ["vision_member", "vision_admin", "nobody"])
def test_a_nul_in_members_from_an_outsider_reads_as_an_unknown_department_and_is_never_looked_up(
    world: World, persona: str
) -> None:
    before = counts()
    with connection.execute_wrapper(seen := HostileParameters()):
        response = world.client(persona).post("/api/v1/projects/", project_body(world, members=["a\x00b"]), format="json")
    assert response.status_code == 400, response.content
    assert list(response.json()["error"]["fields"]) == ["department"]
    assert seen.found == []
    assert counts() == before


@pytest.mark.parametrize("member", ["a\x00b", "\x00", "ok\ud800"])
def test_a_nul_or_a_lone_surrogate_in_members_from_an_admin_is_a_400_naming_members(world: World, member: str) -> None:
    before = counts()
    with connection.execute_wrapper(seen := HostileParameters()):
        body = json.dumps(project_body(world, members=[member]))  # ASCII: a lone surrogate as its \u escape
        response = world.client("nlp_admin").post("/api/v1/projects/", data=body, content_type="application/json")
    assert response.status_code == 400, response.content
    assert list(response.json()["error"]["fields"]) == ["members"]
    assert seen.found == []
    assert counts() == before


@ON_POSTGRES
def test_a_nul_in_members_never_reaches_postgresql(world: World) -> None:
    assert connection.vendor == "postgresql"
    before = counts()
    for persona in ("nobody", "vision_member", "nlp_member", "nlp_admin", "platform"):
        response = lenient(world.client(persona)).post("/api/v1/projects/", project_body(world, members=["a\x00b"]), format="json")
        assert response.status_code in (400, 403), (persona, response.content[:300])
    assert counts() == before


def test_a_nul_in_a_kubeconfig_answers_the_visibility_then_the_permission_then_the_field(world: World) -> None:
    before = counts()
    url = f"/api/v1/clusters/{world.cluster.pk}/kubeconfig/"
    answers = {persona: world.client(persona).put(url, {"kubeconfig": "a\x00"}, format="json") for persona in
               ("nobody", "nlp_member", "auditor", "platform")}
    assert {persona: response.status_code for persona, response in answers.items()} == {
        "nobody": 404, "nlp_member": 403, "auditor": 403, "platform": 400,
    }
    assert list(answers["platform"].json()["error"]["fields"]) == ["kubeconfig"]
    assert counts() == before


def test_a_nul_in_a_flavor_change_answers_the_permission_before_the_field(world: World) -> None:
    url = f"/api/v1/flavors/{world.a100.pk}/"
    answers = {persona: world.client(persona).patch(url, {"display_name": "A\x00"}, format="json") for persona in
               ("nobody", "nlp_admin", "platform")}
    assert {persona: response.status_code for persona, response in answers.items()} == {
        "nobody": 404, "nlp_admin": 403, "platform": 400,
    }
    assert list(answers["platform"].json()["error"]["fields"]) == ["display_name"]
    world.a100.refresh_from_db()
    assert world.a100.display_name == "A100"


@pytest.mark.parametrize(
    ("url", "body"),
    [
        ("/api/v1/departments/", {"slug": "robotics", "name": "Robotics\x00"}),
        ("/api/v1/flavors/", {"name": "l40s\x00"}),
        ("/api/v1/priority-classes/", {"name": "x\x00", "value": 1}),
        ("/api/v1/clusters/", {"name": "c\x00"}),
        ("/api/v1/node-tokens/", {"cluster": 1, "node_name": "n\x00"}),
    ],
)
def test_a_platform_write_answers_403_to_others_before_it_reads_a_nul(world: World, url: str, body: dict[str, Any]) -> None:
    before = counts()
    assert world.client("nlp_admin").post(url, body, format="json").status_code == 403
    refused = world.client("platform").post(url, body, format="json")
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "invalid"
    assert counts() == before


@pytest.mark.parametrize(("action", "persona"), [("approve", "nlp_member"), ("reject", "auditor"), ("renew", "auditor")])
def test_an_allocation_action_answers_403_before_it_reads_the_body(world: World, action: str, persona: str) -> None:
    allocation = pending(world)
    body = {"comment": "\x00", "ends_at": "not a date"}
    response = world.client(persona).post(f"/api/v1/allocations/{allocation.pk}/{action}/", body, format="json")
    assert response.status_code == 403, response.content
    allocation.refresh_from_db()
    assert allocation.state == "pending"


def test_a_request_for_a_project_one_is_not_a_member_of_is_a_403_before_the_body_is_read(world: World) -> None:
    body = {"project": world.llm.pk, "flavor": "\x00", "quantity": "many", "justification": "\x00", "ends_at": "soon"}
    response = world.client("auditor").post("/api/v1/allocations/", body, format="json")
    assert response.status_code == 403, response.content
    assert Allocation.objects.count() == 0


# ---------------------------------------------------------------------- ids beyond 64 bits

LIST_FILTERS = [
    ("/api/v1/projects/", "department"),
    ("/api/v1/allocations/", "project"),
    ("/api/v1/allocations/", "department"),
    ("/api/v1/allocations/", "flavor"),
    ("/api/v1/allocations/", "cluster"),
    ("/api/v1/quotas/", "department"),
    ("/api/v1/nodes/", "cluster"),
    ("/api/v1/node-tokens/", "cluster"),
    ("/api/v1/telemetry/nodes/", "cluster"),
    ("/api/v1/audit/events/", "department"),
    ("/api/v1/audit/export/", "department"),
]


def _oversized_filter(world: World, url: str, name: str) -> None:
    for value in (BEYOND_64_BITS, 10**30):
        response = lenient(world.client("platform")).get(url, {name: str(value)})
        assert response.status_code == 400, (url, name, response.content[:300])
        assert list(response.json()["error"]["fields"]) == [name]
        assert "9223372036854775807" in response.json()["error"]["fields"][name][0]


@pytest.mark.parametrize(("url", "name"), LIST_FILTERS, ids=[f"{url}?{name}" for url, name in LIST_FILTERS])
def test_an_id_beyond_64_bits_in_a_list_filter_is_a_400_naming_it(world: World, url: str, name: str) -> None:
    _oversized_filter(world, url, name)


@ON_POSTGRES
@pytest.mark.parametrize(("url", "name"), LIST_FILTERS, ids=[f"{url}?{name}" for url, name in LIST_FILTERS])
def test_an_id_beyond_64_bits_in_a_list_filter_is_a_400_on_postgresql(world: World, url: str, name: str) -> None:
    assert connection.vendor == "postgresql"
    _oversized_filter(world, url, name)


def _int_routes(patterns: list[URLPattern | URLResolver], prefix: str = "") -> list[str]:
    found = []
    for pattern in patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            found += _int_routes(pattern.url_patterns, route)
        elif route.startswith("api/v1/") and "<int:" in route:
            found.append(route)
    return found


def _path_ids_answer_404(world: World) -> None:
    """Every API route with an id in its path, read and written by the platform admin."""
    routes = _int_routes(get_resolver().url_patterns)
    assert len(routes) >= 15
    client = lenient(world.client("platform"))
    for route in routes:
        url = "/" + route
        while "<int:" in url:
            start = url.index("<int:")
            url = url[:start] + str(BEYOND_64_BITS) + url[url.index(">", start) + 1:]
        for method in ("get", "post", "patch", "put", "delete"):
            status = getattr(client, method)(url, {}, format="json").status_code
            assert status in (404, 405), (method, url, status)


def test_every_integer_in_a_url_is_bounded(world: World) -> None:
    """Guards routes added later: every integer query parameter the OpenAPI schema lists, but the
    page number (too far is a 404 of its own), answers 400 naming it beyond 64 bits; every id in a
    path answers 404 (Django's lookups already treat an id out of range as one that does not exist)."""
    schema = APIClient().get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    checked = []
    for path, operations in schema["paths"].items():
        if "{" in path or "get" not in operations:
            continue
        for parameter in operations["get"].get("parameters", []):
            if parameter["in"] == "query" and parameter["schema"].get("type") == "integer" and parameter["name"] not in ("page", "page_size"):
                response = lenient(world.client("platform")).get(path, {parameter["name"]: str(BEYOND_64_BITS)})
                assert response.status_code == 400, (path, parameter["name"], response.status_code)
                assert parameter["name"] in response.json()["error"]["fields"]
                checked.append((path, parameter["name"]))
    assert len(checked) >= len(LIST_FILTERS) - 1  # the export's filters are the event list's
    _path_ids_answer_404(world)


@pytest.mark.parametrize("value", [BEYOND_64_BITS, -(2**63) - 1, 10**30, str(BEYOND_64_BITS)])
def test_an_id_beyond_64_bits_in_a_body_is_a_400_naming_it(world: World, value: Any) -> None:
    before = counts()
    token = world.client("platform").post("/api/v1/node-tokens/", {"cluster": value, "node_name": "n"}, format="json")
    assert token.status_code == 400
    assert list(token.json()["error"]["fields"]) == ["cluster"]
    assert token.json()["error"]["fields"]["cluster"][0].startswith("Ensure this value is")
    for persona, url, body in (
        ("nlp_member", "/api/v1/allocations/", {"project": value}),
        ("platform", "/api/v1/quotas/", {"department": value, "guaranteed": "0", "limit": "1"}),
        ("platform", "/api/v1/projects/", {"department": value, "slug": "s", "name": "n"}),
    ):
        response = lenient(world.client(persona)).post(url, body, format="json")
        assert response.status_code == 400, (url, response.content[:300])
        assert list(response.json()["error"]["fields"]) == [next(iter(body))]
    assert counts() == before


@ON_POSTGRES
def test_an_id_beyond_64_bits_in_a_body_is_a_400_on_postgresql(world: World) -> None:
    assert connection.vendor == "postgresql"
    test_an_id_beyond_64_bits_in_a_body_is_a_400_naming_it(world, BEYOND_64_BITS)


def test_a_fractional_id_in_a_body_is_refused_not_truncated(world: World) -> None:
    body = {"project": world.llm.pk + 0.5, "flavor": world.a100.pk, "quantity": 1, "justification": "x", **world.window()}
    response = world.client("nlp_member").post("/api/v1/allocations/", body, format="json")
    assert response.status_code == 400, response.content
    assert list(response.json()["error"]["fields"]) == ["project"]
    assert Allocation.objects.count() == 0


# ------------------------------------------------------------------------ the error contract


def test_every_drf_error_carries_the_request_id_of_its_header(world: World, settings: Any) -> None:
    settings.GPUPORTAL_TRUSTED_PROXIES = 1  # a caller's X-Request-ID is taken from a trusted proxy only
    client = world.client("nlp_member")
    responses = [
        client.get("/api/v1/projects/999999/"),
        client.post("/api/v1/allocations/", {}, format="json"),
        client.post("/api/v1/departments/", {}, format="json"),
        APIClient().get("/api/v1/me/"),
        client.get("/api/v1/allocations/", HTTP_X_REQUEST_ID="quoted-by-the-caller.1"),
    ]
    assert [response.status_code for response in responses] == [404, 400, 403, 401, 200]
    for response in responses[:4]:
        assert response.json()["request_id"] == response["X-Request-ID"]
        assert set(response.json()["error"]) >= {"code", "message", "fields"}
    bad = client.get("/api/v1/allocations/?state=dancing", HTTP_X_REQUEST_ID="quoted-by-the-caller.2")
    assert bad.json()["request_id"] == "quoted-by-the-caller.2"


@pytest.mark.urls("tests.security.boom_urls")
def test_an_unhandled_error_under_the_api_is_the_json_envelope_with_the_request_id(
    world: World, caplog: pytest.LogCaptureFixture, settings: Any
) -> None:
    settings.GPUPORTAL_TRUSTED_PROXIES = 1
    with caplog.at_level(logging.ERROR):
        response = lenient(world.client("nlp_member")).get("/api/v1/test-boom/", HTTP_X_REQUEST_ID="op-ticket-42")
    assert response.status_code == 500
    assert response["Content-Type"] == "application/json"
    assert response["X-Request-ID"] == "op-ticket-42"
    body = response.json()
    assert body["request_id"] == "op-ticket-42"
    assert body["error"]["code"] == "server_error"
    assert "op-ticket-42" in body["error"]["message"]
    assert "Boom" not in response.content.decode() and "always fails" not in response.content.decode()
    assert any("op-ticket-42" in record.getMessage() for record in caplog.records)
    assert any(record.exc_info and "always fails" in str(record.exc_info[1]) for record in caplog.records)


def test_an_unhandled_error_in_an_api_view_is_the_json_envelope(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the database went away")

    monkeypatch.setattr("tenants.apis.MeApi.get", fail)
    response = lenient(world.client("nlp_member")).get("/api/v1/me/")
    assert response.status_code == 500
    assert response.json()["error"]["code"] == "server_error"
    assert response.json()["request_id"] == response["X-Request-ID"]
    assert "database" not in response.content.decode()


@pytest.mark.urls("tests.security.boom_urls")
def test_an_unhandled_error_on_a_portal_page_keeps_the_html_page(world: World) -> None:
    client = lenient(world.client("nlp_member"))
    response = client.get("/portal-boom/")
    assert response.status_code == 500
    assert response["Content-Type"].startswith("text/html")
    assert b"<html" in response.content


def test_an_unknown_api_url_is_a_json_404_and_an_unknown_page_an_html_one(world: World, settings: Any) -> None:
    settings.GPUPORTAL_TRUSTED_PROXIES = 1
    api = world.client("nlp_member").get("/api/v1/no-such-thing/", HTTP_X_REQUEST_ID="r-404")
    assert api.status_code == 404
    assert api["Content-Type"] == "application/json"
    assert api.json()["error"]["code"] == "not_found"
    assert api.json()["request_id"] == "r-404"
    page = world.client("nlp_member").get("/no-such-page/")
    assert page.status_code == 404
    assert page["Content-Type"].startswith("text/html")


# ------------------------------------------------------------------------------- discovery


def test_discovery_on_a_manifests_cluster_is_a_409_saying_why(world: World) -> None:
    assert world.cluster.driver == ClusterDriverKind.MANIFESTS
    before = counts()
    response = world.client("platform").post(f"/api/v1/clusters/{world.cluster.pk}/discover/")
    assert response.status_code == 409, response.content
    error = response.json()["error"]
    assert error["code"] == "cluster_not_discoverable"
    assert "manifests" in error["message"] and "Kubernetes" in error["message"]
    assert counts() == before


def test_discovery_on_a_kubernetes_cluster_is_a_409_without_a_kubeconfig_and_a_502_when_unreachable(world: World) -> None:
    cluster = Cluster.objects.create(name="kube-unreachable", driver=ClusterDriverKind.KUBERNETES)
    client = world.client("platform")
    response = client.post(f"/api/v1/clusters/{cluster.pk}/discover/")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "cluster_not_discoverable"
    assert "kubeconfig" in response.json()["error"]["message"]
    kubeconfig = """apiVersion: v1
kind: Config
current-context: c
contexts: [{name: c, context: {cluster: k, user: u}}]
clusters: [{name: k, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: u, user: {token: abc}}]
"""
    assert client.put(f"/api/v1/clusters/{cluster.pk}/kubeconfig/", {"kubeconfig": kubeconfig}, format="json").status_code == 204
    response = client.post(f"/api/v1/clusters/{cluster.pk}/discover/")
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "cluster_unreachable"
