"""The record template: the canonical record prepared before the chain lock, with the five chain
fields put in afterwards (in Python on SQLite, by ``audit_event_append`` on PostgreSQL), is byte
for byte the canonical JSON of the whole record."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from audit import actions
from audit.integrity.canonical import (
    CHAIN_FIELDS,
    canonical_json,
    leaf_hash,
    record_fields,
    record_fill,
    record_template,
)
from audit.redaction import scrub
from audit.services import audit_time_format
from kernel.request_context import RequestContext, request_context
from tests.audit.conftest import record, requires_postgres

TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)  # quotes, backslashes, NUL, U+2028, astral
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False, allow_infinity=False) | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)
HASH = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)


def other_fields(data: st.DataObject) -> dict[str, Any]:
    department_id = data.draw(st.none() | st.integers(1, 2**62))
    return {
        "nonce": data.draw(HASH)[:32], "actor_id": data.draw(st.none() | st.integers(1, 2**62)),
        "actor_username": data.draw(TEXT), "action": data.draw(TEXT), "action_number": data.draw(st.integers(0, 999)),
        "target_type": data.draw(TEXT), "target_id": data.draw(TEXT), "department_id": department_id,
        "outcome": data.draw(TEXT), "before": data.draw(st.dictionaries(TEXT, VALUES, max_size=3)),
        "after": data.draw(st.dictionaries(TEXT, VALUES, max_size=3)),
        "details": data.draw(st.dictionaries(TEXT, VALUES, max_size=3)), "request_id": data.draw(TEXT),
        "source_ip": data.draw(st.none() | TEXT), "user_agent": data.draw(TEXT),
    }


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_the_filled_template_is_the_canonical_record(data: st.DataObject) -> None:
    fields = other_fields(data)
    department = fields["department_id"] is not None
    chain: dict[str, Any] = {
        "seq": data.draw(st.integers(1, 2**62)), "prev_hash": data.draw(HASH),
        "occurred_at": "2026-12-02T06:07:08.123456Z",
        "department_seq": data.draw(st.integers(1, 2**62)) if department else None,
        "department_prev_hash": data.draw(HASH) if department else None,
    }
    template = record_template(**fields)
    assert len(template) == len(CHAIN_FIELDS) + 1
    assert record_fill(template, **chain) == canonical_json(record_fields(**chain, **fields))


def test_the_template_leaves_out_exactly_the_chain_fields() -> None:
    template = record_template(
        nonce="n", actor_id=None, actor_username="", action="a", action_number=1, target_type="", target_id="",
        department_id=None, outcome="success", before={}, after={}, details={"seq": 9, "prev_hash": "x"},
        request_id="", source_ip=None, user_agent="",
    )
    assert [piece.rsplit(",", 1)[-1] for piece in template[:-1]] == [f'"{field}":' for field in CHAIN_FIELDS]
    assert template[0].startswith('{"action":"a"') and template[-1].endswith(',"v":1}')


@pytest.mark.django_db
@requires_postgres
@pytest.mark.parametrize("department_id", [None, 961])
def test_the_database_fills_the_template_as_python_does(postgres: None, department_id: int | None) -> None:
    """``audit_event_append`` builds the record in SQL: it must be the canonical JSON of its own
    fields, hash as the verifier hashes it, and agree with the row's columns."""
    tricky = {"quote\"back\\slash": "é ∑ 😀 \u2028", "nested": [1.5, -0.0, 10**20, None, True, {"z": 1, "a": []}]}
    context = RequestContext(request_id="req-7", source_ip="2001:db8::1", user_agent="ua")
    with request_context(context):
        first = record(department_id, details=tricky)
        second = record(department_id, details={"after": first.seq})
    for event in (first, second):
        payload = json.loads(event.record)
        assert event.record.encode("ascii") == canonical_json(payload)
        assert event.hash == leaf_hash(event.record.encode("ascii")).hex()
        assert payload["occurred_at"] == audit_time_format(event.occurred_at)
        assert (payload["seq"], payload["department_seq"], payload["department_id"]) == (
            event.seq, event.department_seq, department_id)
        assert payload["request_id"] == "req-7" and payload["action"] == actions.NODE_UPDATED.code
    assert first.details == scrub(tricky)
    assert second.prev_hash == first.hash and second.occurred_at >= first.occurred_at
    if department_id is not None:
        assert second.payload["department_prev_hash"] == first.hash
        assert second.department_seq == (first.department_seq or 0) + 1
