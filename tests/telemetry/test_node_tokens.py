"""Node tokens: platform admins issue (shown once) and revoke them, audited; only a hash is kept."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from audit.models import AuditEvent
from telemetry import tokens
from telemetry.models import NodeToken
from tests.conftest import World
from tests.telemetry.fixtures import add_node, make_report, post_report


def test_a_platform_admin_issues_a_token_shown_once(world: World) -> None:
    add_node(world.cluster, "gpu-a100-07")
    client = world.client("platform")
    response = client.post(
        "/api/v1/node-tokens/", {"cluster": world.cluster.pk, "node_name": "gpu-a100-07", "description": "rack 4"},
        format="json",
    )  # fmt: skip
    assert response.status_code == 201, response.json()
    assert response["Cache-Control"] == "no-store"
    body = response.json()
    text = body["token"]
    assert text.startswith("gpn_") and body["active"] and body["created_by"] == "platform"
    assert post_report(APIClient(), "gpu-a100-07", make_report("a100-80gb-mig", node_name="gpu-a100-07"), text).status_code == 200

    listed = client.get("/api/v1/node-tokens/").json()["results"]
    assert [row["id"] for row in listed] == [body["id"]] and "token" not in listed[0]
    assert "token" not in client.get(f"/api/v1/node-tokens/{body['id']}/").json()
    row = NodeToken.objects.get()
    secret = text.split("_", 2)[2]
    assert text not in {row.key_id, row.secret_hash} and secret not in row.secret_hash
    assert row.secret_hash == tokens.secret_hash(secret)
    issued = AuditEvent.objects.get(action="node_token.issued")
    assert issued.after == {"cluster": "test-cluster", "node_name": "gpu-a100-07", "description": "rack 4"}
    assert all(secret not in event.record for event in AuditEvent.objects.all())


def test_a_platform_admin_revokes_a_token_audited(world: World) -> None:
    client = world.client("platform")
    issued = client.post("/api/v1/node-tokens/", {"cluster": world.cluster.pk, "node_name": "n1"}, format="json").json()
    response = client.post(f"/api/v1/node-tokens/{issued['id']}/revoke/")
    assert response.status_code == 200
    assert response.json()["active"] is False and response.json()["revoked_by"] == "platform"
    assert client.post(f"/api/v1/node-tokens/{issued['id']}/revoke/").status_code == 200  # again: no change
    assert AuditEvent.objects.filter(action="node_token.revoked").count() == 1
    active = client.get("/api/v1/node-tokens/", {"active": "true"}).json()["results"]
    revoked = client.get("/api/v1/node-tokens/", {"active": "false"}).json()["results"]
    assert active == [] and [row["id"] for row in revoked] == [issued["id"]]
    assert client.post("/api/v1/node-tokens/999999/revoke/").status_code == 404


@pytest.mark.parametrize("persona", ["nlp_admin", "nlp_member", "auditor", "nobody"])
def test_only_platform_admins_see_issue_or_revoke_tokens(world: World, persona: str) -> None:
    token = world.client("platform").post(
        "/api/v1/node-tokens/", {"cluster": world.cluster.pk, "node_name": "n1"}, format="json"
    ).json()
    client = world.client(persona)
    assert client.get("/api/v1/node-tokens/").status_code == 403
    assert client.get(f"/api/v1/node-tokens/{token['id']}/").status_code == 403
    issue = client.post("/api/v1/node-tokens/", {"cluster": world.cluster.pk, "node_name": "n2"}, format="json")
    assert issue.status_code == 403
    assert client.post(f"/api/v1/node-tokens/{token['id']}/revoke/").status_code == 403
    assert NodeToken.objects.count() == 1 and NodeToken.objects.get().revoked_at is None
    assert world.client(None).get("/api/v1/node-tokens/").status_code == 401


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"cluster": 999999, "node_name": "n1"}, "cluster"),
        ({"node_name": "n1"}, "cluster"),
        ({"cluster": 1, "node_name": "Not_A_Node"}, "node_name"),
        ({"cluster": 1, "node_name": "x" * 254}, "node_name"),
    ],
)
def test_a_bad_issue_request_gets_400_naming_the_field(world: World, body: dict[str, object], field: str) -> None:
    if body.get("cluster") == 1:
        body = {**body, "cluster": world.cluster.pk}
    response = world.client("platform").post("/api/v1/node-tokens/", body, format="json")
    assert response.status_code == 400
    assert field in response.json()["error"]["fields"]


def test_token_text_round_trips_and_malformed_text_is_refused() -> None:
    new = tokens.token_generate()
    parts = tokens.token_split(new.text)
    assert parts is not None and parts[0] == new.key_id
    assert tokens.secret_matches(parts[1], new.secret_hash)
    assert not tokens.secret_matches(parts[1][:-1] + ("A" if parts[1][-1] != "A" else "B"), new.secret_hash)
    for bad in ("", "gpn_", new.text + "x", new.text.replace("gpn_", "gpx_"), new.text[:-1]):
        assert tokens.token_split(bad) is None
