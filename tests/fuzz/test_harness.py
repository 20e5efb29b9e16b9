"""The fuzz step's harness and the schema it reads, checked without a server: every operation is
fuzzed by some identity holding the credentials it takes, the schema gives every operation its
error answers, lists their paginated shape and relations their integer ids, and the generated
schemathesis configuration loads."""

from __future__ import annotations

import datetime
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from drf_spectacular.generators import SchemaGenerator
from schemathesis.config import SchemathesisConfig

from tests.fuzz import bindings, hooks, run

RELATIONS = {"project", "flavor", "department", "cluster", "priority_class", "parent"}


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    generated: dict[str, Any] = SchemaGenerator().get_schema(request=None, public=True)  # type: ignore[no-untyped-call]
    return generated


def operations(schema: dict[str, Any]) -> dict[str, tuple[str, str, dict[str, Any]]]:
    return {
        operation["operationId"]: (method, path, operation)
        for path, methods in schema["paths"].items()
        for method, operation in methods.items()
    }


def resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[-1]]
    return node


def test_every_operation_is_fuzzed_with_the_credentials_it_takes(schema: dict[str, Any]) -> None:
    for operation_id, (_, _, operation) in operations(schema).items():
        runs = [
            identity for identity in run.IDENTITIES
            if (identity.operations is None or operation_id in identity.operations) and operation_id not in identity.skip
        ]  # fmt: skip
        assert runs, f"{operation_id} is fuzzed by no identity"
        node_only = operation.get("security") == [{"nodeToken": []}]
        assert any(identity.node_token == node_only for identity in runs), operation_id


def test_every_operation_documents_its_error_answers(schema: dict[str, Any]) -> None:
    for operation_id, (_, _, operation) in operations(schema).items():
        responses = operation["responses"]
        assert any(code.startswith("4") for code in responses), operation_id
        if operation.get("security") != [{}] and operation_id != run.TOKEN_OPERATION:
            assert "401" in responses, operation_id
        for code, response in responses.items():
            if code >= "400":
                assert response["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}


def test_lists_are_paginated_and_relations_are_integer_ids(schema: dict[str, Any]) -> None:
    for operation_id, (method, _, operation) in operations(schema).items():
        ok = operation["responses"].get("200", {}).get("content", {}).get("application/json", {}).get("schema")
        if method == "get" and ok is not None:
            body = resolve(schema, ok)
            assert body.get("type") != "array", f"{operation_id} answers a bare list"
            if "results" in body.get("properties", {}):
                assert {"count", "next", "previous", "results"} <= set(body["properties"]), operation_id
        request = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
        if request is not None:
            for name, field in resolve(schema, request).get("properties", {}).items():
                if name in RELATIONS:
                    assert field.get("type") == "integer", f"{operation_id}: {name} is {field}"


def test_the_schemathesis_configuration_loads(tmp_path: Path) -> None:
    prepared = {
        "ids": {"allocation": [1, 2], "cluster": [1], "department": [1, 2, 3], "flavor": [1], "gpu": [], "node": [1],
                "priority_class": [1], "project": [1], "quota": [1], "token": [1]},
        "node": {"name": "a100-node-1", "token": "gpn_x"},
        "users": {},
    }  # fmt: skip
    text = run.config_text(prepared)
    config = SchemathesisConfig.from_str(text)
    assert config is not None
    ends = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=7)
    assert ends.strftime("%Y-%m-%d") in text


def test_the_summary_reads_the_access_log(tmp_path: Path) -> None:
    schema_file = tmp_path / "schema.json"
    schema_file.write_text('{"paths": {"/api/v1/flavors/{flavor_id}/": {"get": {"operationId": "v1_flavors_retrieve"}}}}')
    log = tmp_path / "access.log"
    log.write_text(
        "researcher GET 200 0.010 /api/v1/flavors/1/\n"
        "researcher GET 500 0.020 /api/v1/flavors/2/\n"
        "outsider PUT 405 0.001 /api/v1/flavors/ with space/\n"
    )
    found = run.tally(log, run.operation_matchers(schema_file))
    assert found[("v1_flavors_retrieve", "researcher")].statuses == {200: 1, 500: 1}
    assert found[("(undocumented method or path)", "outsider")].total == 1
    assert run.server_errors(found) == ["v1_flavors_retrieve as researcher: 1 x 500"]
    assert "2 - 5xx:1" in "\n".join(run.summary(found, ["researcher", "outsider"]))
    reports = tmp_path / "reports"
    reports.mkdir()
    cases = {
        "a": {"value": {"method": "GET", "path": "/api/v1/flavors/{flavor_id}/", "meta": {"generation": {"mode": "positive"}}}},
        "b": {"value": {"method": "GET", "path": "/api/v1/flavors/{flavor_id}/", "meta": {"generation": {"mode": "positive"}}}},
        "c": {"value": {"method": "GET", "path": "/api/v1/flavors/{flavor_id}/", "meta": {"generation": {"mode": "negative"}}}},
    }
    interactions = {case: {"response": {"status_code": status}} for case, status in (("a", 200), ("b", 404), ("c", 400))}
    event = {"ScenarioFinished": {"recorder": {"cases": cases, "interactions": interactions}}}
    (reports / "ndjson-1.ndjson").write_text('{"Initialize": {}}\n' + json.dumps(event) + "\n")
    run.count_valid(found, reports, "researcher", schema_file)
    assert "2 50% 5xx:1" in "\n".join(run.summary(found, ["researcher", "outsider"]))


def write_operations(schema: dict[str, Any]) -> dict[str, tuple[str, str, dict[str, Any]]]:
    return {key: value for key, value in operations(schema).items() if value[0] in bindings.WRITE_METHODS}


def test_every_write_operation_has_a_binding(schema: dict[str, Any]) -> None:
    """A new write route must say how its valid requests are bound (tests/fuzz/bindings.py): its actor,
    the fresh objects its path names, and every id, time or name field of its body, else the fuzz
    step would send it little but 4xx."""
    writes = write_operations(schema)
    unbound = sorted(set(writes) - set(bindings.OPERATIONS))
    assert not unbound, f"write operations with no binding in tests/fuzz/bindings.py: {unbound}"
    assert not set(bindings.OPERATIONS) - set(operations(schema)), "bindings of operations the schema no longer has"
    assert set(bindings.EXCEPTIONS) <= set(bindings.OPERATIONS)
    assert all(reason.strip() for reason in bindings.EXCEPTIONS.values())
    runs = {identity.name: identity for identity in run.IDENTITIES}
    for operation_id, (_, _, operation) in writes.items():
        binding = bindings.OPERATIONS[operation_id]
        actor = runs[binding.actor]
        assert (actor.operations is None or operation_id in actor.operations) and operation_id not in actor.skip, (
            f"{operation_id}: its actor {binding.actor} does not run it"
        )
        assert set(binding.targets.values()) <= set(hooks.RECIPES), operation_id
        assert binding.body is None or binding.body in hooks.FIXES, operation_id
        for parameter in operation.get("parameters", []):
            if parameter["in"] == "path":
                name = parameter["name"]
                assert name in binding.targets or name in bindings.FIELDS or binding.body, f"{operation_id}: path {name}"
        request = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
        if request is None or binding.body is not None:
            continue
        for name, field in resolve(schema, request).get("properties", {}).items():
            field = resolve(schema, field)
            bindable = field.get("format") in ("int64", "date-time") or name in RELATIONS | {"user", "username", "members"}
            if bindable and not field.get("readOnly"):
                assert name in bindings.FIELDS, f"{operation_id}: body field {name} ({field}) has no binding"
    assert set(bindings.FIELDS.values()) <= set(hooks.BINDERS)


def test_bound_requests_name_real_objects() -> None:
    """The hook replaces a generated request's ids and times by the actor's objects, fresh ones where
    a decision consumes its object, and applies the body's fix."""
    prepared = {
        "users": {"researcher": "r", "department-admin": "d", "platform-admin": "p"},
        "ids": {"project": [7, 8], "quota": [3]}, "visible": {"department-admin": {"project": [8]}},
        "named": {"project:nlp-llm": 8, "flavor:a100-80gb": 2, "priority_class:gpu-standard": 1, "quota:nlp": 3,
                  "department:nlp": 4},
        "node": {"name": "a100-node-1"}, "open_cases": {},
    }  # fmt: skip
    calls: list[tuple[str, str, str, Any]] = []

    def call(identity: str, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        calls.append((identity, method, path, body))
        return {"id": 40 + len(calls)}

    setup = hooks.Setup(prepared, "department-admin", "http://127.0.0.1:1")
    setup.call = call  # type: ignore[method-assign]
    path, body = setup_bind(setup, "v1_allocations_approve_create", {"allocation_id": 999999}, {"comment": "x"})
    assert path == {"allocation_id": 41} and body == {"comment": "x"}
    assert [(identity, method, path) for identity, method, path, _ in calls] == [("researcher", "POST", "/api/v1/allocations/")]
    _, window = setup_bind(setup, "v1_quota_windows_create", {}, {"quota": 12345, "kind": "recurring", "rrule": "FREQ=SECONDLY"})
    assert window["quota"] == 3 and window["kind"] == "temporary" and "rrule" not in window
    assert window["begins_at"] < window["ends_at"]
    _, membership = setup_bind(setup, "v1_projects_members_create", {"project_id": 5}, {"user": "zz"})
    assert membership["user"] in {"alice", "bob", "carol", "dave", "erin"}


def test_objects_made_for_a_request_are_the_objects_not_their_pending_changes() -> None:
    """With four-eyes on, a quota or priority class made for requests is an emergency with its reason
    (a plain create answers 202 with a rule change, whose id is no quota's); a rule change to decide
    is proposed by the second platform admin, one to withdraw by the actor; a node token is the
    answer's id (its "token" is the text); an issued token and an open idle case are used once."""
    prepared = {
        "users": {"platform-admin": "p", "second-platform-admin": "f", "researcher": "r"},
        "ids": {}, "visible": {}, "named": {"cluster:demo": 1, "department:vision": 3},
        "node": {"name": "a100-node-1"}, "open_cases": {}, "issued_tokens": {"researcher": [71, 72]},
    }  # fmt: skip
    calls: list[tuple[str, str, str, Any]] = []

    def call(identity: str, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        calls.append((identity, method, path, body))
        if path == "/api/v1/node-tokens/":
            return {"id": 40 + len(calls), "token": "gpn_secret"}
        return {"id": 40 + len(calls)}

    setup = hooks.Setup(prepared, "platform-admin", "http://127.0.0.1:1")
    setup.call = call  # type: ignore[method-assign]
    path, body = setup_bind(setup, "v1_quotas_partial_update", {"quota_id": 9}, {"emergency": True, "reason": " "})
    assert path == {"quota_id": 42} and body["reason"].strip()
    assert calls[-1][2] == "/api/v1/quotas/" and calls[-1][3]["emergency"] is True and calls[-1][3]["reason"]
    made = len(calls)  # a change that consumes nothing changes the run's own object again
    assert setup_bind(setup, "v1_quotas_partial_update", {"quota_id": 9}, {})[0] == {"quota_id": 42} and len(calls) == made
    _, body = setup_bind(setup, "v1_priority_classes_partial_update", {"priority_class_id": 9}, {"name": "x", "value": 5})
    assert "name" not in body and calls[-1][3]["emergency"] is True
    assert setup_bind(setup, "v1_node_tokens_revoke_create", {"token_id": 9}, None)[0] == {"token_id": 44}
    path, _ = setup_bind(setup, "v1_rule_changes_approve_create", {"change_id": 9}, {"comment": ""})
    assert path == {"change_id": 45} and calls[-1][0] == "second-platform-admin"
    path, body = setup_bind(setup, "v1_rule_changes_reject_create", {"change_id": 9}, {"comment": ""})
    assert path == {"change_id": 46} and body["comment"].strip()
    path, _ = setup_bind(setup, "v1_rule_changes_withdraw_create", {"change_id": 9}, None)
    assert path == {"change_id": 47} and calls[-1][0] == "platform-admin" and "emergency" not in calls[-1][3]
    path, _ = setup_bind(setup, "v1_idle_policies_partial_update", {"policy_id": 1}, {"is_active": False})
    assert path == {"policy_id": 48} and calls[-1][3]["is_active"] is False
    researcher = hooks.Setup(prepared, "researcher", "http://127.0.0.1:1")
    claimed = [setup_bind(researcher, "v1_auth_tokens_claim_create", {"token_id": 1}, None)[0] for _ in range(2)]
    assert claimed == [{"token_id": 71}, {"token_id": 72}]


def setup_bind(setup: Any, operation_id: str, path: dict[str, Any], body: Any) -> tuple[dict[str, Any], Any]:
    return hooks.bind(setup, operation_id, path, body)


def test_literal_paths_are_counted_as_their_own_operations(tmp_path: Path) -> None:
    """`/quota-windows/shrinks/` and `/statements/preview/` are not a window or a statement."""
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps({"paths": {
        "/api/v1/quota-windows/{window_id}/": {"get": {"operationId": "window"}},
        "/api/v1/quota-windows/shrinks/": {"get": {"operationId": "shrinks"}},
        "/api/v1/statements/{statement_id}/": {"get": {"operationId": "statement"}},
        "/api/v1/statements/preview/": {"get": {"operationId": "preview"}},
    }}))  # fmt: skip
    log = tmp_path / "access.log"
    log.write_text(
        "auditor GET 200 0.01 /api/v1/quota-windows/shrinks/\nauditor GET 200 0.01 /api/v1/quota-windows/4/\n"
        "auditor GET 200 0.01 /api/v1/statements/preview/\nauditor GET 404 0.01 /api/v1/statements/9/\n"
    )
    found = run.tally(log, run.operation_matchers(schema_file))
    assert {operation: counts.total for (operation, _), counts in found.items()} == {
        "shrinks": 1, "window": 1, "preview": 1, "statement": 1}


def test_the_operation_table_holds_writes_to_half_valid(tmp_path: Path) -> None:
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps({"paths": {
        "/api/v1/allocations/": {"post": {"operationId": "v1_allocations_create"}},
        "/api/v1/quota-windows/": {"post": {"operationId": "v1_quota_windows_create"}},
        "/api/v1/brand-new/": {"delete": {"operationId": "v1_brand_new_destroy"}},
    }}))  # fmt: skip
    found: dict[tuple[str, str], run.Tally] = {
        ("v1_allocations_create", "researcher"): run.Tally(Counter({201: 6, 400: 4}), valid=6, valid_ok=6),
        ("v1_allocations_create", "auditor"): run.Tally(Counter({403: 5})),
        ("v1_quota_windows_create", "department-admin"): run.Tally(Counter({201: 2, 400: 8}), valid=5, valid_ok=2),
        ("v1_allocations_create", hooks.SETUP): run.Tally(Counter({201: 3})),
    }
    table = run.operation_table(found, schema_file)
    text = "\n".join(table.lines)
    assert "POST /api/v1/allocations/" in text and " 15     6     9    0  researcher" in text, text
    assert [line.split(" (")[0] for line in table.short] == ["DELETE /api/v1/brand-new/", "POST /api/v1/quota-windows/"]
    assert "2 of 5 valid requests" in table.short[1]
    assert (table.valid, table.valid_ok) == (11, 8)
    assert text.endswith("3")  # the setup requests, on a line of their own
