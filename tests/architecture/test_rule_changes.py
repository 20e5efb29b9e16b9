"""Four-eyes on the rules has one door: the catalogue's writes of quotas and priority classes
(``allocations.rules.catalogue``) are called only by ``allocations.rules.changes``, which decides whether a
change waits for a second platform admin (``rule_change_needs_second``); the API, the portal and the
Django admin go through it. Read from the source with ``ast``; the demo data, which is seeded
before anyone signs in, and the tests may call the catalogue directly."""

from __future__ import annotations

import ast

from tests.architecture.imports import ROOT, module_name, source_files

RULE_WRITES = frozenset({
    "quota_set", "quota_update", "quota_delete", "priority_class_create", "priority_class_update", "priority_class_delete",
})
DOOR = {"allocations.rules.catalogue", "allocations.rules.changes"}
SEEDED = ("demo.",)


def rule_writes_called(source: str) -> list[tuple[int, str]]:
    """(line, name) of each call of a catalogue rule write, by name or as an attribute."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in RULE_WRITES:
                found.append((node.lineno, name))
    return found


def test_only_the_rule_changes_call_the_catalogues_rule_writes() -> None:
    outside = []
    for path in source_files():
        module = module_name(path)
        if module in DOOR or module.startswith(SEEDED):
            continue
        outside += [f"{path.relative_to(ROOT)}:{line} {name}()" for line, name in rule_writes_called(path.read_text())]
    assert outside == [], "call allocations.rules.changes.rule_change_propose instead (four-eyes on the rules)"


def test_the_check_finds_a_direct_call() -> None:
    assert rule_writes_called("catalog.quota_update(actor=a, quota_id=1)\nquota_set(actor=a)") == [
        (1, "quota_update"), (2, "quota_set"),
    ]
