"""A JSON Schema (draft 2020-12) validator for exactly the keywords the agent report schema uses.

No JSON Schema package is installed, and an unknown keyword silently ignored would make the check
weaker than the schema says, so ``Validator`` refuses a schema that uses any keyword outside
``SUPPORTED_KEYWORDS``. The schema is compiled once into nested closures, so validating a report
is one pass over it without re-reading the schema. Every violation names the value's JSON pointer
(RFC 6901, e.g. ``/gpus/0/uuid``). No Django import: the agent's tests can use it as well.

Nearly every report is valid, so the schema is compiled twice: into predicates that only say
whether a value is valid (no pointers built, no error lists; ``is_valid``), and into the checks that
name every violation, which run only when a predicate said no. Both follow the same keywords in the
same way; a property test holds them to the same answer.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from telemetry.schema_keywords import (
    SUPPORTED_KEYWORDS,
    TYPE_CLASSES,
    TYPE_WORDS,
    UnsupportedSchema,
    ecma_pattern,
    is_number,
    pointer_token,
    resolve_reference,
    same,
    string_keywords,
)
from telemetry.schema_predicates import Predicates

__all__ = ["SUPPORTED_KEYWORDS", "SchemaError", "UnsupportedSchema", "Validator", "ecma_pattern", "pointer_token"]


@dataclass(frozen=True)
class SchemaError:
    pointer: str  # JSON pointer of the offending value; "" is the document itself
    message: str
    expected_type: str = ""  # set on a type mismatch: what the value should have been ("a string or null")


Check = Callable[[Any, str, list[SchemaError]], None]


def _describe(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


class Validator:
    """Compiled from a schema once; ``errors(instance)`` lists the violations, at most ``max_errors``."""

    def __init__(self, schema: Mapping[str, Any], *, max_errors: int = 50) -> None:
        self.root = schema
        self.max_errors = max_errors
        self._compiled_refs: dict[str, Check] = {}
        self._check = self._compile(schema)
        self._predicates = Predicates(schema)

    def is_valid(self, instance: Any) -> bool:
        return self._predicates.root(instance)

    def errors(self, instance: Any) -> list[SchemaError]:
        if self._predicates.root(instance):
            return []
        found: list[SchemaError] = []
        self._check(instance, "", found)
        return found[: self.max_errors]

    # ------------------------------------------------------------------------------ compiling

    def _compile(self, schema: Mapping[str, Any]) -> Check:
        unknown = sorted(set(schema) - SUPPORTED_KEYWORDS)
        if unknown:
            raise UnsupportedSchema(f"unsupported JSON Schema keywords: {', '.join(unknown)}")
        checks: list[Check] = []
        if "$ref" in schema:
            checks.append(self._reference(str(schema["$ref"])))
        type_check = self._type(schema.get("type"))
        value_checks: list[Check] = []
        if "const" in schema:
            value_checks.append(self._const(schema["const"]))
        if "enum" in schema:
            value_checks.append(self._enum(list(schema["enum"])))
        if "anyOf" in schema:
            value_checks.append(self._any_of([self._compile(option) for option in schema["anyOf"]]))
        if {"properties", "required", "additionalProperties"} & set(schema):
            value_checks.append(self._object(schema))
        if {"items", "maxItems", "uniqueItems"} & set(schema):
            value_checks.append(self._array(schema))
        if {"minLength", "maxLength", "pattern", "format"} & set(schema):
            value_checks.append(self._string(schema))
        if {"minimum", "maximum"} & set(schema):
            value_checks.append(self._range(schema.get("minimum"), schema.get("maximum")))

        def check(value: Any, pointer: str, errors: list[SchemaError]) -> None:
            for each in checks:
                each(value, pointer, errors)
            if type_check is not None and not type_check(value, pointer, errors):
                return
            for each in value_checks:
                each(value, pointer, errors)

        return check

    def _reference(self, reference: str) -> Check:
        node = resolve_reference(self.root, reference)

        def check(value: Any, pointer: str, errors: list[SchemaError]) -> None:
            compiled = self._compiled_refs.get(reference)
            if compiled is None:  # compiled on first use, so recursive schemas terminate
                compiled = self._compiled_refs[reference] = self._compile(node)
            compiled(value, pointer, errors)

        return check

    def _type(self, declared: Any) -> Callable[[Any, str, list[SchemaError]], bool] | None:
        if declared is None:
            return None
        names = [declared] if isinstance(declared, str) else list(declared)
        unknown = [name for name in names if name not in TYPE_CLASSES]
        if unknown:
            raise UnsupportedSchema(f"unknown types: {unknown}")
        allowed = frozenset(cls for name in names for cls in TYPE_CLASSES[name])
        expected = " or ".join(TYPE_WORDS[name] for name in names)

        def check(value: Any, pointer: str, errors: list[SchemaError]) -> bool:
            if type(value) in allowed:
                return True
            errors.append(SchemaError(pointer, f"must be {expected}, not {_describe(value)}", expected_type=expected))
            return False

        return check

    @staticmethod
    def _const(expected: Any) -> Check:
        def check(value: Any, pointer: str, errors: list[SchemaError]) -> None:
            if not same(value, expected):
                errors.append(SchemaError(pointer, f"must be {_describe(expected)}"))

        return check

    @staticmethod
    def _enum(options: list[Any]) -> Check:
        listed = ", ".join(_describe(option) for option in options)

        def check(value: Any, pointer: str, errors: list[SchemaError]) -> None:
            if not any(same(value, option) for option in options):
                errors.append(SchemaError(pointer, f"must be one of {listed}, not {_describe(value)}"))

        return check

    @staticmethod
    def _any_of(options: list[Check]) -> Check:
        def check(value: Any, pointer: str, errors: list[SchemaError]) -> None:
            outcomes = []
            for option in options:
                found: list[SchemaError] = []
                option(value, pointer, found)
                if not found:
                    return
                outcomes.append(found)
            # Report the branch whose type fitted (its errors say what is wrong inside it); when no
            # branch's type fitted, one line naming the types allowed.
            fitting = [found for found in outcomes if not (found[0].expected_type and found[0].pointer == pointer)]
            if len(fitting) == 1:
                errors.extend(fitting[0])
                return
            allowed = " or ".join(dict.fromkeys(found[0].expected_type or "valid" for found in outcomes))
            errors.append(SchemaError(pointer, f"must be {allowed}, not {_describe(value)}", expected_type=allowed))

        return check

    def _object(self, schema: Mapping[str, Any]) -> Check:
        properties = {
            name: (self._compile(sub), "/" + pointer_token(name)) for name, sub in schema.get("properties", {}).items()
        }
        required = list(schema.get("required", []))
        additional = schema.get("additionalProperties", True)
        if additional not in (True, False):
            raise UnsupportedSchema("additionalProperties must be true or false")

        def check(value: Any, pointer: str, errors: list[SchemaError]) -> None:
            if not isinstance(value, dict):
                return
            for name in required:
                if name not in value:
                    errors.append(SchemaError(f"{pointer}/{pointer_token(name)}", "this field is required"))
            for name, item in value.items():
                known = properties.get(name)
                if known is not None:
                    known[0](item, pointer + known[1], errors)
                elif additional is False:
                    errors.append(SchemaError(f"{pointer}/{pointer_token(str(name))}", "unknown field"))

        return check

    def _array(self, schema: Mapping[str, Any]) -> Check:
        items = self._compile(schema["items"]) if "items" in schema else None
        max_items = schema.get("maxItems")
        unique = bool(schema.get("uniqueItems", False))

        def check(value: Any, pointer: str, errors: list[SchemaError]) -> None:
            if not isinstance(value, list):
                return
            if max_items is not None and len(value) > max_items:
                errors.append(SchemaError(pointer, f"at most {max_items} items, not {len(value)}"))
                return  # do not walk a list that is already too long
            if unique and len({json.dumps(item, sort_keys=True) for item in value}) != len(value):
                errors.append(SchemaError(pointer, "items must be unique"))
            if items is not None:
                for index, item in enumerate(value):
                    items(item, f"{pointer}/{index}", errors)

        return check

    @staticmethod
    def _string(schema: Mapping[str, Any]) -> Check:
        min_length, max_length, pattern, text_format = string_keywords(schema)

        def check(value: Any, pointer: str, errors: list[SchemaError]) -> None:
            if not isinstance(value, str):
                return
            if min_length is not None and len(value) < min_length:
                errors.append(SchemaError(pointer, f"at least {min_length} characters"))
            if max_length is not None and len(value) > max_length:
                errors.append(SchemaError(pointer, f"at most {max_length} characters, not {len(value)}"))
                return
            if pattern is not None and not pattern.search(value):
                errors.append(SchemaError(pointer, f"{_describe(value)} does not match {pattern.pattern}"))
                return
            if text_format == "date-time":
                try:
                    datetime.fromisoformat(value)
                except ValueError:
                    errors.append(SchemaError(pointer, f"{_describe(value)} is not a valid date-time"))

        return check

    @staticmethod
    def _range(minimum: Any, maximum: Any) -> Check:
        def check(value: Any, pointer: str, errors: list[SchemaError]) -> None:
            if not is_number(value):
                return
            if minimum is not None and value < minimum:
                errors.append(SchemaError(pointer, f"at least {minimum}, not {value}"))
            if maximum is not None and value > maximum:
                errors.append(SchemaError(pointer, f"at most {maximum}, not {value}"))

        return check
