"""The node report's request body for the OpenAPI 3.0 schema: the agent's own JSON Schema (draft
2020-12, ``agent/report_schema.json``) written in OpenAPI 3.0's dialect, so that the API's schema
describes exactly what ``POST /api/v1/nodes/{node_name}/report`` validates.

Definitions are inlined, ``type: [X, "null"]`` and ``anyOf: [X, {"type": "null"}]`` become
``nullable``, and ``const`` becomes a one-value ``enum``.
"""

from __future__ import annotations

from typing import Any

from agent.report import load_schema

_DROPPED = frozenset({"$schema", "$id", "$defs"})


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    members = schema.get("anyOf")
    if not isinstance(members, list) or {"type": "null"} not in members:
        return schema
    others = [member for member in members if member != {"type": "null"}]
    rest = {key: value for key, value in schema.items() if key != "anyOf"}
    if len(others) == 1:
        return {**others[0], **rest, "nullable": True}
    return {**rest, "anyOf": others, "nullable": True}


def _convert(node: Any, definitions: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_convert(item, definitions) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = _convert(definitions[node["$ref"].removeprefix("#/$defs/")], definitions)
        siblings = {key: value for key, value in node.items() if key != "$ref"}
        return {**target, **_convert(siblings, definitions)}
    converted: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED:
            continue
        if key == "const":
            converted["enum"] = [value]
        elif key == "type" and isinstance(value, list):
            types = [name for name in value if name != "null"]
            if len(types) != 1:
                raise ValueError(f"cannot write type {value} in OpenAPI 3.0")
            converted["type"] = types[0]
            if "null" in value:
                converted["nullable"] = True
        elif key == "properties":
            converted[key] = {name: _convert(schema, definitions) for name, schema in value.items()}
        else:
            converted[key] = _convert(value, definitions)
    return _nullable(converted)


def report_request_schema() -> dict[str, Any]:
    """The report's schema as an OpenAPI 3.0 schema object."""
    schema = load_schema()
    converted: dict[str, Any] = _convert(schema, schema.get("$defs", {}))
    return converted
