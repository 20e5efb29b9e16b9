"""The API's conventions (docs/api.md): the OpenAPI schema is valid, types ids as integers, tags and
describes each resource and documents the errors every operation shares; unknown query parameters
and body fields are a 400 naming them; lists sort with ``?ordering=``; an unknown URL under
``/api/`` is the JSON error body, with DEBUG on too."""

from __future__ import annotations

import datetime
import json
import re
from typing import Any

import pytest
from django.conf import settings
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, resolve
from django.utils import timezone
from drf_spectacular.drainage import GENERATOR_STATS
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer
from drf_spectacular.validation import validate_schema
from rest_framework import serializers
from rest_framework.test import APIRequestFactory

from accounting.idle_models import IdlePolicy
from allocations.models import PriorityClass
from audit.models import AuditEvent
from clusters.models import Node
from kernel.api.base import UNKNOWN_FIELD, unknown_fields
from kernel.api.schema import ALWAYS_ACCEPTED, documented, documented_query_params
from kernel.api.views import NO_BODY, UNKNOWN_PARAMETER, ApiView
from telemetry.models import ObservedGpu
from tenants.models import Project
from tests.conftest import World

METHODS = ("get", "post", "put", "patch", "delete")
# Ids that are not database ids: the audit event's target (any object's key, as text), the request
# id of the request behind an event, and a node token's public key id.
STRING_IDS = {("AuditEvent", "target_id"), ("AuditEvent", "request_id"), ("NodeTokenOut", "key_id"),
              ("NodeTokenIssuedOut", "key_id")}  # fmt: skip
# Lists that are not database rows: the fixed catalogue of sharing modes, and the coming quota
# shrinks (soonest first); the audit log reads in its chain's order.
UNORDERED_LISTS = {"/api/v1/sharing-modes/", "/api/v1/quota-windows/shrinks/", "/api/v1/audit/events/"}


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    GENERATOR_STATS.reset()
    generated = SchemaGenerator().get_schema(request=None, public=True)  # type: ignore[no-untyped-call]
    problems = dict(GENERATOR_STATS._warn_cache) | dict(GENERATOR_STATS._error_cache)
    assert problems == {}, "the schema generator warned or failed"
    loaded: dict[str, Any] = json.loads(OpenApiJsonRenderer().render(generated))
    return loaded


def operations(schema: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(path, method, operation) for path, item in schema["paths"].items() for method, operation in item.items()
            if method in METHODS]  # fmt: skip


def query_names(operation: dict[str, Any]) -> set[str]:
    return {parameter["name"] for parameter in operation.get("parameters", []) if parameter["in"] == "query"}


# ------------------------------------------------------------------------------------ the schema


def test_the_schema_is_valid_openapi(schema: dict[str, Any]) -> None:
    validate_schema(schema)  # type: ignore[no-untyped-call]  # the OpenAPI 3.0 JSON Schema, as `spectacular --validate` does
    assert len(operations(schema)) >= 98


def test_every_id_in_a_path_is_an_integer(schema: dict[str, Any]) -> None:
    ids = [(path, parameter["name"], parameter["schema"].get("type"))
           for path, _, operation in operations(schema) for parameter in operation.get("parameters", [])
           if parameter["in"] == "path" and (parameter["name"] == "id" or parameter["name"].endswith("_id"))]  # fmt: skip
    assert len(ids) > 50
    assert [(path, name) for path, name, kind in ids if kind != "integer"] == []


def test_every_id_field_of_a_body_or_answer_is_an_integer(schema: dict[str, Any]) -> None:
    wrong = []
    for name, component in schema["components"]["schemas"].items():
        for field, definition in (component.get("properties") or {}).items():
            if (field == "id" or field.endswith("_id")) and (name, field) not in STRING_IDS:
                kinds = {definition.get("type")} | {item.get("type") for item in definition.get("allOf", [])}
                if "integer" not in kinds:
                    wrong.append(f"{name}.{field}")
    assert wrong == []


def test_every_operation_documents_the_errors_it_can_answer(schema: dict[str, Any]) -> None:
    missing = []
    for path, method, operation in operations(schema):
        expected = {"400", "401"}  # an unknown query parameter; no or bad credentials
        if "{" in path or "page" in query_names(operation):
            expected.add("404")  # no such object, or no such page
        if "requestBody" in operation:
            expected |= {"413", "415"}
        lacking = expected - set(operation["responses"])
        if lacking:
            missing.append(f"{method.upper()} {path}: {sorted(lacking)}")
        for status, response in operation["responses"].items():
            if status.startswith(("4", "5")):
                assert response["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}
                assert response["description"]
    assert missing == []


def test_every_request_body_refuses_other_fields(schema: dict[str, Any]) -> None:
    components = schema["components"]["schemas"]
    open_bodies = []
    for path, method, operation in operations(schema):
        if "requestBody" not in operation:
            continue
        body = operation["requestBody"]["content"]["application/json"]["schema"]
        body = components[body["$ref"].rpartition("/")[2]] if "$ref" in body else body
        if body.get("additionalProperties") is not False:
            open_bodies.append(f"{method.upper()} {path}")
    assert open_bodies == []


def test_every_operation_is_tagged_with_its_described_resource(schema: dict[str, Any]) -> None:
    described = {tag["name"]: tag["description"] for tag in schema["tags"]}
    assert all(described.values())
    used = set()
    for path, _, operation in operations(schema):
        assert operation["tags"] == [path.split("/")[3]], path
        used.add(operation["tags"][0])
    assert used == set(described), "a tag without operations, or operations without a described tag"


def test_every_list_documents_its_ordering(schema: dict[str, Any]) -> None:
    lists = {path: operation for path, method, operation in operations(schema) if method == "get" and "page" in query_names(operation)}
    assert len(lists) >= 20
    for path, operation in lists.items():
        ordering = [parameter for parameter in operation["parameters"] if parameter["name"] == "ordering"]
        if path in UNORDERED_LISTS:
            assert ordering == [], path
            continue
        assert len(ordering) == 1, path
        choices = ordering[0]["schema"]["enum"]
        assert "id" in choices and "-id" in choices, path
        assert all(f"-{choice}" in choices for choice in choices if not choice.startswith("-")), path


def _view_for(path: str, method: str) -> tuple[ApiView, Any]:
    url = re.sub(r"\{[^}]+\}", "1", path)
    match = resolve(url)
    django_request = APIRequestFactory().generic(method.upper(), url)
    django_request.resolver_match = match
    view = match.func.view_class(**match.func.view_initkwargs)  # type: ignore[attr-defined]
    request = view.initialize_request(django_request, **match.kwargs)
    view.request, view.kwargs = request, match.kwargs
    return view, request


def test_each_view_accepts_exactly_the_query_parameters_the_schema_documents(schema: dict[str, Any]) -> None:
    for path, method, operation in operations(schema):
        view, request = _view_for(path, method)
        assert isinstance(view, ApiView), path
        assert documented_query_params(view, request) == query_names(operation) | ALWAYS_ACCEPTED, f"{method} {path}"
        assert documented(view, request).body == ("requestBody" in operation), f"{method} {path}"


def _api_views(patterns: list[URLPattern | URLResolver], prefix: str = "") -> list[tuple[str, Any]]:
    found = []
    for pattern in patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            found += _api_views(pattern.url_patterns, route)
        elif route.startswith("api/v1/"):
            found.append((route, pattern.callback))
    return found


def test_every_api_route_is_served_by_an_api_view() -> None:
    views = _api_views(get_resolver().url_patterns)
    assert len(views) > 60
    assert [route for route, view in views if not issubclass(getattr(view, "view_class", object), ApiView)] == []


# ---------------------------------------------------------------------------- unknown parameters


def test_an_unknown_query_parameter_is_a_400_naming_it(world: World) -> None:
    response = world.client("nlp_member").get("/api/v1/allocations/", {"state": "pending", "colour": "red", "sort": "x"})
    assert response.status_code == 400
    body = response.json()
    assert body["error"]["code"] == "invalid"
    assert body["error"]["fields"] == {"colour": [UNKNOWN_PARAMETER], "sort": [UNKNOWN_PARAMETER]}
    assert body["request_id"]


def test_documented_query_parameters_and_format_are_accepted(world: World) -> None:
    client = world.client("nlp_member")
    response = client.get("/api/v1/allocations/", {"state": "pending", "mine": "true", "page_size": "5", "format": "json"})
    assert response.status_code == 200
    assert client.get("/api/v1/allocations/?format=api").status_code == 200  # DRF's browsable API


def test_a_write_refuses_an_unknown_query_parameter_before_it_changes_anything(world: World) -> None:
    body = {"slug": "nlp-new", "name": "New", "department": world.nlp.pk}
    response = world.client("nlp_admin").post("/api/v1/projects/?dry_run=1", body, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {"dry_run": [UNKNOWN_PARAMETER]}
    assert not Project.objects.filter(slug="nlp-new").exists()


def test_an_anonymous_caller_gets_401_before_any_parameter_is_looked_at(world: World) -> None:
    assert world.client(None).get("/api/v1/allocations/", {"colour": "red"}).status_code == 401


def test_an_unknown_body_field_is_a_400_naming_it_with_the_other_bad_fields(world: World) -> None:
    client = world.client("nlp_admin")
    body = {"slug": "nlp-new", "name": "", "department": world.nlp.pk, "colour": "red", "id": 7}
    response = client.post("/api/v1/projects/", body, format="json")
    assert response.status_code == 400
    fields = response.json()["error"]["fields"]
    assert fields["colour"] == [UNKNOWN_FIELD] and fields["id"] == [UNKNOWN_FIELD]  # id is read-only: not input
    assert "name" in fields
    assert not Project.objects.filter(slug="nlp-new").exists()


def test_a_settings_patch_names_a_field_that_is_not_a_setting(world: World) -> None:
    response = world.client("platform").patch(f"/api/v1/clusters/{world.cluster.pk}/", {"name": "renamed"}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {"name": [UNKNOWN_FIELD]}


def test_an_operation_that_takes_no_body_refuses_one(world: World) -> None:
    client = world.client("platform")
    url = f"/api/v1/clusters/{world.cluster.pk}/sync/"
    response = client.post(url, {"force": True}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {"force": [UNKNOWN_FIELD]}
    response = client.post(url, "[1]", content_type="application/json")
    assert response.status_code == 400 and response.json()["error"]["fields"] == {"body": [NO_BODY]}
    assert client.post(url, {}, format="json").status_code == 202  # an empty object is no body
    assert client.post(url).status_code == 202


class _Member(serializers.Serializer[Any]):
    username = serializers.CharField()
    role = serializers.CharField(required=False)


class _Team(serializers.Serializer[Any]):
    name = serializers.CharField()
    lead = _Member()
    members = _Member(many=True)
    aliases = serializers.ListField(child=serializers.CharField())
    labels = serializers.DictField(child=serializers.CharField())


def test_unknown_fields_are_found_in_nested_objects_and_lists_of_them() -> None:
    data = {
        "name": "x", "lead": {"username": "a", "shoe_size": 44}, "members": [{"username": "b"}, {"username": "c", "age": 3}],
        "aliases": ["y"], "labels": {"anything": "goes"}, "colour": "red",
    }  # fmt: skip
    assert unknown_fields(_Team(data=data), data) == {
        "lead.shoe_size": [UNKNOWN_FIELD], "members.1.age": [UNKNOWN_FIELD], "colour": [UNKNOWN_FIELD],
    }  # fmt: skip
    assert unknown_fields(_Team(data=["not", "an", "object"]), ["not", "an", "object"]) == {}


# ------------------------------------------------------------------------------------- ordering


def test_a_list_sorts_by_the_ordering_asked_for(world: World) -> None:
    client = world.client("platform")
    ascending = [row["slug"] for row in client.get("/api/v1/departments/", {"ordering": "slug"}).json()["results"]]
    descending = [row["slug"] for row in client.get("/api/v1/departments/", {"ordering": "-slug"}).json()["results"]]
    assert ascending == sorted(ascending) and len(ascending) == 4
    assert descending == ascending[::-1]
    ids = [row["id"] for row in client.get("/api/v1/departments/", {"ordering": "-id"}).json()["results"]]
    assert ids == sorted(ids, reverse=True)


def test_equal_sort_keys_are_ordered_by_id(world: World) -> None:
    client = world.client("platform")
    rows = client.get("/api/v1/quotas/", {"ordering": "limit"}).json()["results"]
    keys = [(float(row["limit"]), row["id"]) for row in rows]
    assert keys == sorted(keys) and len({limit for limit, _ in keys}) < len(keys)  # ties exist, broken by id
    rows = client.get("/api/v1/quotas/", {"ordering": "-limit"}).json()["results"]
    keys = [(float(row["limit"]), row["id"]) for row in rows]
    assert keys == sorted(keys, reverse=True)


@pytest.mark.parametrize("value", ["colour", "-", "--slug", "slug,name", ""])
def test_an_ordering_that_is_not_offered_is_a_400_naming_it(world: World, value: str) -> None:
    response = world.client("platform").get("/api/v1/departments/", {"ordering": value})
    if value == "":
        assert response.status_code == 200  # empty: the default order
        return
    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == ["ordering"]


def test_two_orderings_are_refused(world: World) -> None:
    response = world.client("platform").get("/api/v1/departments/?ordering=slug&ordering=-id")
    assert response.status_code == 400 and list(response.json()["error"]["fields"]) == ["ordering"]


def test_every_ordering_of_every_list_answers(world: World, schema: dict[str, Any]) -> None:
    now = timezone.now()
    node = Node.objects.filter(cluster=world.cluster).first()
    assert node is not None
    gpu = node.gpus.first()
    assert gpu is not None
    observed = ObservedGpu.objects.create(node=node, uuid="GPU-1", gpu=gpu, index=gpu.index, first_seen_at=now, last_seen_at=now)
    ids = {"cluster_id": world.cluster.pk, "gpu_id": observed.pk, "department_id": world.nlp.pk,
           "project_id": world.llm.pk}
    client = world.client("platform")
    since = (now - datetime.timedelta(days=1)).isoformat()
    answered = {}
    for path, method, operation in operations(schema):
        ordering = [parameter for parameter in operation.get("parameters", []) if parameter["name"] == "ordering"]
        if method != "get" or not ordering:
            continue
        url = re.sub(r"\{([^}]+)\}", lambda found: str(ids[str(found[1])]), path)
        for choice in ordering[0]["schema"]["enum"]:
            params = {"ordering": choice, **({"since": since} if "since" in query_names(operation) else {})}
            answered[f"{url}?ordering={choice}"] = client.get(url, params).status_code
    assert len(answered) > 100
    assert {url: status for url, status in answered.items() if status != 200} == {}


# ----------------------------------------------------------------------------- unknown URLs


@pytest.mark.parametrize("debug", [False, True])
@pytest.mark.parametrize("url", ["/api/v1/nothing-here/", "/api/v2/allocations/", "/api/", "/api/v1/allocations/abc/"])
def test_an_unknown_api_url_is_the_json_error_body(world: World, settings: Any, debug: bool, url: str) -> None:
    settings.DEBUG = debug
    for method in ("get", "post", "delete"):
        response = getattr(world.client("nlp_member"), method)(url)
        assert response.status_code == 404, (method, url)
        assert response["Content-Type"] == "application/json"
        body = response.json()
        assert body["error"]["code"] == "not_found" and body["request_id"]


def test_an_api_url_without_its_trailing_slash_says_so(world: World) -> None:
    response = world.client("nlp_member").post("/api/v1/allocations", {}, format="json")
    assert response.status_code == 404
    assert "/api/v1/allocations/" in response.json()["error"]["message"]


def test_a_method_an_endpoint_does_not_take_is_a_json_405(world: World) -> None:
    response = world.client("nlp_member").delete("/api/v1/allocations/")
    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"


def test_a_page_outside_the_api_keeps_the_html_404(world: World, settings: Any) -> None:
    settings.DEBUG = False
    response = Client().get("/no-such-page/")
    assert response.status_code == 404
    assert "application/json" not in response["Content-Type"]


def test_the_schema_and_the_docs_are_still_served() -> None:
    assert settings.REST_FRAMEWORK["DEFAULT_SCHEMA_CLASS"] == "kernel.api.schema.AutoSchema"
    assert Client().get("/api/docs/").status_code == 200


# -------------------------------------------------------------- bodies and representations


def test_a_body_over_the_limit_is_a_413_before_it_is_parsed(world: World, settings: Any) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    client = world.client("nlp_admin")
    body = json.dumps({"slug": "nlp-big", "name": "a" * 2000, "department": world.nlp.pk})
    response = client.post("/api/v1/projects/", body, content_type="application/json")
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"
    assert list(response.json()["error"]["fields"]) == ["body"]
    small = json.dumps({"slug": "nlp-small", "name": "Small", "department": world.nlp.pk})
    assert client.post("/api/v1/projects/", small, content_type="application/json").status_code == 201


def test_a_body_that_is_not_json_is_a_415_and_an_unmet_accept_a_406(world: World) -> None:
    client = world.client("nlp_admin")
    response = client.post("/api/v1/projects/", "slug=x", content_type="text/plain")
    assert response.status_code == 415 and response.json()["error"]["code"] == "unsupported_media_type"
    response = client.get("/api/v1/projects/", HTTP_ACCEPT="application/xml")
    assert response.status_code == 406 and response.json()["error"]["code"] == "not_acceptable"


# ------------------------------------------------------------------------ deleting what is in use


def test_deleting_what_rows_of_another_app_still_refer_to_is_a_409_naming_them(world: World, settings: Any) -> None:
    settings.GPUPORTAL_FOUR_EYES = False  # the removal itself (with four-eyes on, its approval answers the 409)
    IdlePolicy.objects.create(name="idle-standard", priority_class=world.preemptible)
    response = world.client("platform").delete(f"/api/v1/priority-classes/{world.preemptible.pk}/")
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "conflict" and error["details"] == {"referenced_by": {"idle policies": 1}}
    assert "1 idle policy;" in error["message"]
    assert PriorityClass.objects.filter(pk=world.preemptible.pk).exists()
    assert not AuditEvent.objects.filter(action="priority_class.deleted").exists()
