"""The report endpoint walks a report's strings for NULs and lone surrogates only when its body
could hold one (``telemetry.apis._may_hold_hostile_text``): the pre-check may say yes too often,
never too seldom, whatever the encoding ``json.loads`` accepts."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rest_framework.exceptions import ValidationError
from rest_framework.test import APIClient

from kernel.api.base import refuse_hostile_text
from telemetry.apis import _may_hold_hostile_text
from telemetry.models import NodeReportState
from tests.conftest import World
from tests.telemetry.fixtures import add_node, agent, issue_token, make_report, post_report  # noqa: F401 (fixtures)
from tests.telemetry.test_report_endpoint import IssueToken

NODE = "gpu-a100-07"

# Every code point, lone surrogates and NUL included, with the awkward ones drawn often.
_CHARACTERS = st.one_of(
    st.characters(codec=None, exclude_categories=()),
    st.sampled_from(["\x00", "\ud800", "\udfff", "\udc00", "\u00e9", "\U0001f600", "\\", '"', "u"]),
)
_TEXT = st.text(alphabet=_CHARACTERS, max_size=6)
_DOCUMENTS = st.dictionaries(
    _TEXT, st.recursive(_TEXT | st.integers(), lambda inner: st.lists(inner, max_size=3), max_leaves=4), max_size=3
)


def _bodies(document: dict[str, Any]) -> list[bytes]:
    """The document as a client could send it: escaped or raw, upper- or lower-case escapes, in
    every encoding that ``json.loads`` reads from bytes."""
    escaped = json.dumps(document)
    upper = re.sub(r"\\u([0-9a-f]{4})", lambda match: "\\u" + match.group(1).upper(), escaped)
    raw = json.dumps(document, ensure_ascii=False)
    texts = [escaped, upper, raw]
    bodies = [text.encode("utf-8", "surrogatepass") for text in texts]
    for encoding in ("utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"):
        bodies.extend(text.encode(encoding, "surrogatepass") for text in (escaped, upper))
    return bodies


def _refused(body: bytes) -> bool:
    try:
        data = json.loads(body)
    except ValueError:
        return False  # not JSON: the endpoint answers 400 before the walk
    try:
        refuse_hostile_text(data)
    except ValidationError:
        return True
    return False


@settings(max_examples=300, deadline=None)
@given(document=_DOCUMENTS)
def test_every_body_whose_report_the_walk_refuses_is_walked(document: dict[str, Any]) -> None:
    for body in _bodies(document):
        if _refused(body):
            assert _may_hold_hostile_text(body), body


def test_a_plain_ascii_report_skips_the_walk() -> None:
    assert not _may_hold_hostile_text(json.dumps(make_report("h200-8gpu-node", node_name=NODE)).encode())


@pytest.mark.parametrize(
    ("name", "encoding"),
    [("NVIDIA A100\\u0000", "utf-16-le"), ("NVIDIA A100\\uD800", "utf-8"), ("NVIDIA A100\\u0000", "utf-32-be")],
)
def test_a_nul_or_a_lone_surrogate_in_any_encoding_is_a_400_and_stores_nothing(
    world: World, issue_token: IssueToken, agent: APIClient, name: str, encoding: str  # noqa: F811 (fixtures)
) -> None:
    add_node(world.cluster, NODE)
    _, token = issue_token(NODE)
    report = make_report("a100-80gb-mig", node_name=NODE)
    report["gpus"][0]["name"] = "__NAME__"
    body = json.dumps(report).replace("__NAME__", name).encode(encoding)

    response = post_report(agent, NODE, body, token)

    assert response.status_code == 400, response.content
    assert "gpus" in response.json()["error"]["fields"]
    assert not NodeReportState.objects.filter(sequence=1).exists()
