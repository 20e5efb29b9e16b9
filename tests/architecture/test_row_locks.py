"""Row locks name the table they lock (read from the source with ``ast``; nothing is imported).

``select_for_update()`` over ``select_related()`` locks the rows of every joined table, and
PostgreSQL refuses it outright on the nullable side of an outer join ("FOR UPDATE cannot be applied
to the nullable side of an outer join"), which SQLite never reports. A query that joins and locks
must say which rows it locks with ``of=``, and so stay in the lock order of ``kernel.locks``.
"""

from __future__ import annotations

import ast

from tests.architecture.imports import ROOT, source_files


def _chain(call: ast.Call) -> list[ast.Call]:
    """The calls of a method chain, outermost first: ``a.b(...).c(...)`` gives ``c(...)``, ``b(...)``."""
    calls = []
    node: ast.expr = call
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        calls.append(node)
        node = node.func.value
    return calls


def joined_locks_without_of(source: str) -> list[int]:
    """The lines of ``select_for_update`` calls without ``of=`` in chains that also ``select_related``."""
    tree = ast.parse(source)
    inner = {id(call.func.value) for call in ast.walk(tree)
             if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)}
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or id(node) in inner:
            continue  # only whole chains, from their outermost call
        calls = {call.func.attr: call for call in _chain(node) if isinstance(call.func, ast.Attribute)}
        lock = calls.get("select_for_update")
        if lock is not None and "select_related" in calls and not any(k.arg == "of" for k in lock.keywords):
            lines.append(lock.func.end_lineno or lock.lineno)  # the line of the name itself
    return lines


def test_every_row_lock_over_a_join_says_which_rows_it_locks() -> None:
    wrong = [f"{path.relative_to(ROOT)}:{line}" for path in source_files()
             for line in joined_locks_without_of(path.read_text())]
    assert wrong == []


def test_the_check_finds_a_lock_over_a_join_in_either_order() -> None:
    source = """
a = Token.objects.select_for_update().select_related("cluster").get(pk=1)
b = (Quota.objects.select_related("flavor")
     .select_for_update().get(pk=1))
c = Quota.objects.select_for_update(of=("self",)).select_related("flavor").get(pk=1)
d = Quota.objects.select_for_update().get(pk=1)
"""
    assert joined_locks_without_of(source) == [2, 4]
