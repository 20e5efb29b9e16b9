"""The fuzz step's harness and the schema it reads, checked without a server: every operation is
fuzzed by some identity holding the credentials it takes, the schema gives every operation its
error answers, lists their paginated shape and relations their integer ids, and the generated
schemathesis configuration loads."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pytest
from drf_spectacular.generators import SchemaGenerator
from schemathesis.config import SchemathesisConfig

from tests.fuzz import run

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
