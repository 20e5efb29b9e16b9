"""The report schema as predicates: whether a value is valid, without building the JSON pointers
and error lists of ``schema_check.Validator``'s checks. Nearly every report is valid, so the
validator asks these first and runs its checks only for a report they refuse; both follow the
keywords of ``schema_keywords`` in the same way, and a property test holds them to the same answer.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from telemetry.schema_keywords import (
    SUPPORTED_KEYWORDS,
    TYPE_CLASSES,
    UnsupportedSchema,
    is_number,
    resolve_reference,
    same,
    string_keywords,
)

Predicate = Callable[[Any], bool]


class Predicates:
    """The schema as predicates (``Validator.is_valid``): the keywords of ``Validator._compile``
    with the same meaning, answering only valid or not."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self._schema = schema
        self._compiled_refs: dict[str, Predicate] = {}
        self._compiling: set[str] = set()
        self.root = self._compile(schema)

    def _compile(self, schema: Mapping[str, Any]) -> Predicate:
        unknown = sorted(set(schema) - SUPPORTED_KEYWORDS)
        if unknown:
            raise UnsupportedSchema(f"unsupported JSON Schema keywords: {', '.join(unknown)}")
        predicates: list[Predicate] = []
        if "$ref" in schema:
            predicates.append(self._reference(str(schema["$ref"])))
        declared = schema.get("type")
        if declared is not None:
            names = [declared] if isinstance(declared, str) else list(declared)
            if any(name not in TYPE_CLASSES for name in names):
                raise UnsupportedSchema(f"unknown types: {names}")
            allowed = frozenset(cls for name in names for cls in TYPE_CLASSES[name])
            predicates.append(lambda value: type(value) in allowed)
        if "const" in schema:
            expected = schema["const"]
            predicates.append(lambda value: same(value, expected))
        if "enum" in schema:
            options = list(schema["enum"])
            predicates.append(lambda value: any(same(value, option) for option in options))
        if "anyOf" in schema:
            predicates.append(_any_of([self._compile(option) for option in schema["anyOf"]]))
        if {"properties", "required", "additionalProperties"} & set(schema):
            predicates.append(self._object(schema))
        if {"items", "maxItems", "uniqueItems"} & set(schema):
            predicates.append(self._array(schema))
        if {"minLength", "maxLength", "pattern", "format"} & set(schema):
            predicates.append(self._string(schema))
        if {"minimum", "maximum"} & set(schema):
            predicates.append(self._range(schema.get("minimum"), schema.get("maximum")))
        return _all_of(predicates)

    def _reference(self, reference: str) -> Predicate:
        """Compiled where it is first met, so a value checks through it without a look-up; a
        reference met again while it is being compiled (a recursive schema) looks it up when used."""
        compiled = self._compiled_refs.get(reference)
        if compiled is not None:
            return compiled
        if reference in self._compiling:
            return lambda value: self._compiled_refs[reference](value)
        node = resolve_reference(self._schema, reference)
        self._compiling.add(reference)
        compiled = self._compiled_refs[reference] = self._compile(node)
        self._compiling.discard(reference)
        return compiled

    def _object(self, schema: Mapping[str, Any]) -> Predicate:
        properties = {name: self._compile(sub) for name, sub in schema.get("properties", {}).items()}
        required = list(schema.get("required", []))
        closed = schema.get("additionalProperties", True) is False

        def valid(value: Any) -> bool:
            if not isinstance(value, dict):
                return True
            for name in required:
                if name not in value:
                    return False
            for name, item in value.items():
                known = properties.get(name)
                if known is None:
                    if closed:
                        return False
                elif not known(item):
                    return False
            return True

        return valid

    def _array(self, schema: Mapping[str, Any]) -> Predicate:
        items = self._compile(schema["items"]) if "items" in schema else None
        max_items = schema.get("maxItems")
        unique = bool(schema.get("uniqueItems", False))

        def valid(value: Any) -> bool:
            if not isinstance(value, list):
                return True
            if max_items is not None and len(value) > max_items:
                return False
            if unique and len({json.dumps(item, sort_keys=True) for item in value}) != len(value):
                return False
            return items is None or all(items(item) for item in value)

        return valid

    @staticmethod
    def _string(schema: Mapping[str, Any]) -> Predicate:
        min_length, max_length, pattern, text_format = string_keywords(schema)

        def valid(value: Any) -> bool:
            if not isinstance(value, str):
                return True
            if min_length is not None and len(value) < min_length:
                return False
            if max_length is not None and len(value) > max_length:
                return False
            if pattern is not None and not pattern.search(value):
                return False
            if text_format == "date-time":
                try:
                    datetime.fromisoformat(value)
                except ValueError:
                    return False
            return True

        return valid

    @staticmethod
    def _range(minimum: Any, maximum: Any) -> Predicate:
        def valid(value: Any) -> bool:
            if not is_number(value):
                return True
            return (minimum is None or value >= minimum) and (maximum is None or value <= maximum)

        return valid


def _all_of(predicates: list[Predicate]) -> Predicate:
    if not predicates:
        return lambda value: True
    if len(predicates) == 1:
        return predicates[0]
    if len(predicates) == 2:
        first, second = predicates
        return lambda value: first(value) and second(value)

    def valid(value: Any) -> bool:
        for predicate in predicates:
            if not predicate(value):
                return False
        return True

    return valid


def _any_of(predicates: list[Predicate]) -> Predicate:
    if len(predicates) == 2:
        first, second = predicates
        return lambda value: first(value) or second(value)

    def valid(value: Any) -> bool:
        for predicate in predicates:
            if predicate(value):
                return True
        return False

    return valid
