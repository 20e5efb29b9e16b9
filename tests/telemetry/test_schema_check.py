"""The portal's report validator: the agent's schema, its keywords, and JSON pointers."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.report import load_schema
from telemetry.schema_check import SUPPORTED_KEYWORDS, UnsupportedSchema, Validator, pointer_token
from tests.agent.schema_subset import validate as agent_validate
from tests.telemetry.fixtures import make_report

RECORDINGS = ["a100-80gb-mig", "h100-80gb-no-mig", "h200-8gpu-node", "faulty-gpus-node"]


def _keywords(schema: Any, found: set[str]) -> set[str]:
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key in ("properties", "$defs"):
                for sub in value.values():
                    _keywords(sub, found)
            else:
                found.add(key)
                _keywords(value, found)
    elif isinstance(schema, list):
        for item in schema:
            _keywords(item, found)
    return found


def test_the_schema_uses_only_keywords_the_validator_implements() -> None:
    assert _keywords(load_schema(), set()) <= SUPPORTED_KEYWORDS


def test_an_unknown_keyword_is_refused_rather_than_ignored() -> None:
    with pytest.raises(UnsupportedSchema, match="oneOf"):
        Validator({"oneOf": [{"type": "string"}]})
    with pytest.raises(UnsupportedSchema, match="format"):
        Validator({"type": "string", "format": "email"})


@pytest.mark.parametrize("recording", RECORDINGS)
def test_every_recorded_report_is_valid(recording: str) -> None:
    report = make_report(recording, node_name="gpu-node-1")
    assert Validator(load_schema()).errors(report) == []
    assert agent_validate(report, load_schema()) == []


@pytest.mark.parametrize(
    ("change", "pointer"),
    [
        (lambda r: r["gpus"][0].update(memory_total_bytes=-1), "/gpus/0/memory_total_bytes"),
        (lambda r: r["gpus"][0].update(name=""), "/gpus/0/name"),
        (lambda r: r["gpus"][0].update(ecc_errors={"volatile_corrected": 1}), "/gpus/0/ecc_errors/volatile_uncorrected"),
        (lambda r: r["gpus"][0]["mig_instances"][0].update(profile="9g.1gb"), "/gpus/0/mig_instances/0/profile"),
        (lambda r: r["gpus"][0]["processes"][0].update(pod_uid="POD"), "/gpus/0/processes/0/pod_uid"),
        (lambda r: r.update(agent_version="1.0.0\n"), "/agent_version"),
        (lambda r: r.update(schema_version="1"), "/schema_version"),
        (lambda r: r.update(errors=[{"call": "x"}]), "/errors/0/field"),
    ],
)
def test_the_validator_and_the_agents_agree_on_what_is_wrong(change: Any, pointer: str) -> None:
    report = make_report("a100-80gb-mig", node_name="gpu-node-1")
    change(report)
    errors = Validator(load_schema()).errors(report)
    assert pointer in [error.pointer for error in errors], errors
    assert agent_validate(report, load_schema()) != []


def test_a_nullable_value_of_the_wrong_kind_names_both_kinds() -> None:
    report = make_report("h100-80gb-no-mig", node_name="gpu-node-1")
    report["gpus"][0]["uuid"] = 5
    (error,) = Validator(load_schema()).errors(report)
    assert error.pointer == "/gpus/0/uuid" and error.message == "must be a string or null, not 5"


def test_pointers_escape_slash_and_tilde_and_errors_are_capped() -> None:
    assert pointer_token("a/b~c") == "a~1b~0c"
    validator = Validator({"type": "object", "additionalProperties": False}, max_errors=3)
    errors = validator.errors({f"k{i}": i for i in range(10)})
    assert len(errors) == 3 and errors[0].message == "unknown field"
    assert Validator({"type": "object"}).errors([])[0].pointer == ""


# --------------------------------------------------------------------- the predicates and the checks

_JSON_LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**40), max_value=2**40),
    st.floats(allow_nan=False, allow_infinity=False), st.sampled_from(["", "GPU-1", "1g.10gb", "2026-12-01T10:00:00Z", "x" * 300]),
    st.text(max_size=12),
)  # fmt: skip
_JSON = st.recursive(
    _JSON_LEAVES, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)  # fmt: skip


def _containers(value: Any) -> list[Any]:
    """Every object and array inside ``value``, itself first."""
    found = [value]
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
    for child in children:
        if isinstance(child, dict | list):
            found.extend(_containers(child))
    return found


@st.composite
def _mutated_reports(draw: st.DrawFn) -> dict[str, Any]:
    """A recorded report with a few random changes: a value replaced by any JSON or pushed just past
    a bound, a field removed, an unknown field added, an array item dropped or duplicated."""
    report = make_report(draw(st.sampled_from(RECORDINGS)), node_name="gpu-node-1")
    for _ in range(draw(st.integers(min_value=0, max_value=3))):
        container = draw(st.sampled_from(_containers(report)))
        if not container:
            continue
        keys = list(container) if isinstance(container, dict) else list(range(len(container)))
        key = draw(st.sampled_from(keys))
        action = draw(st.sampled_from(["replace", "remove", "add", "duplicate", "edge"]))
        if action == "edge":  # a number just past a bound, a string past a length or pattern
            current = container[key]
            if isinstance(current, bool) or current is None:
                container[key] = draw(st.sampled_from([0, "true", None if current is not None else False]))
            elif isinstance(current, int | float):
                container[key] = draw(st.sampled_from([-1, -0.5, 101, 2**31, 2**63, current + 0.5]))
            elif isinstance(current, str):
                container[key] = draw(st.sampled_from(["", current + "\n", current.upper(), current * 40, " " + current]))
        elif action == "replace":
            container[key] = draw(_JSON)
        elif action == "remove":
            del container[key]
        elif action == "add" and isinstance(container, dict):
            container[draw(st.text(min_size=1, max_size=8))] = draw(_JSON)
        elif isinstance(container, list):
            container.append(container[key])
    return report


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(report=_mutated_reports())
def test_the_fast_predicates_say_valid_exactly_when_the_checks_find_nothing(report: dict[str, Any]) -> None:
    """``errors`` trusts the predicates for a valid report and runs the checks only for an invalid
    one: the predicates must agree with the checks and with the agent's own validator."""
    validator = _VALIDATOR
    valid = validator.is_valid(report)
    assert valid == (validator.errors(report) == [])
    assert valid == (agent_validate(report, load_schema()) == [])


_VALIDATOR = Validator(load_schema())
