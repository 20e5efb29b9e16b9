"""The telemetry endpoints in the OpenAPI schema, the node token as a bearer scheme."""

from __future__ import annotations

from rest_framework.test import APIClient

from tests.conftest import World


def test_the_openapi_schema_lists_the_telemetry_endpoints(world: World) -> None:
    response = APIClient().get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    schema = response.json()
    for path in ("/api/v1/nodes/{node_name}/report", "/api/v1/node-tokens/", "/api/v1/node-tokens/{token_id}/revoke/",
                 "/api/v1/telemetry/nodes/", "/api/v1/telemetry/nodes/{node_id}/",
                 "/api/v1/telemetry/gpus/{gpu_id}/samples/"):  # fmt: skip
        assert path in schema["paths"], path
    assert schema["components"]["securitySchemes"]["nodeToken"] == {
        "type": "http", "scheme": "bearer", "description": "A node agent token (gpn_...)."
    }  # fmt: skip
    assert schema["paths"]["/api/v1/nodes/{node_name}/report"]["post"]["security"] == [{"nodeToken": []}]
