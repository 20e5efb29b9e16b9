"""Row locks name the table they lock, and are taken in the global lock order (read from the
source with ``ast``; nothing of the apps is imported).

``select_for_update()`` over ``select_related()`` locks the rows of every joined table, and
PostgreSQL refuses it outright on the nullable side of an outer join ("FOR UPDATE cannot be applied
to the nullable side of an outer join"), which SQLite never reports. A query that joins and locks
must say which rows it locks with ``of=``, and so stay in the lock order of ``kernel.locks``.

The order itself is data (``kernel.locks.LOCK_ORDER``): within each function, the rows it locks
(directly, or through a helper of its own module that locks) come in that order; docs/security.md
lists it as the code holds it; and every foreign key of the rows the periodic writers add points
to a kind in it (``references_key_share`` locks those first, by it).

Lock strength is data too (``kernel.locks.NO_KEY_KINDS``): those kinds are locked FOR NO KEY UPDATE,
which the KEY SHARE of a foreign-key check never waits for, and FOR UPDATE only in the functions
``kernel.locks.FULL_ROW_LOCKS`` lists with a reason.
"""

from __future__ import annotations

import ast
import re

from django.apps import apps

from kernel.locks import FULL_ROW_LOCKS, LOCK_ORDER, NO_KEY_KINDS
from tests.architecture.imports import ROOT, source_files

# Helpers of other modules that lock one kind, by the name they are called with.
LOCKING_HELPERS: dict[str, str] = {"allocation_lock": "Allocation"}
# The models that the periodic writers of derived rows add in bulk (the usage roll-up, the
# utilisation tick), after locking what the rows refer to (``kernel.locks.references_key_share``).
PERIODIC_ROWS: tuple[str, ...] = ("accounting.UsageHour", "accounting.UsageDay", "telemetry.AllocationUsage")


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


def _kind_ranks() -> dict[str, int]:
    return {label.split(".")[1]: rank for rank, label in enumerate(LOCK_ORDER)}


def _locked_model(call: ast.Call) -> str | None:
    """The model a whole chain ``Model.objects....select_for_update(...)...`` locks and may wait for
    (None for a SKIP LOCKED lock, which never waits, and for other calls)."""
    lock = next((c for c in _chain(call) if isinstance(c.func, ast.Attribute) and c.func.attr == "select_for_update"), None)
    if lock is None or any(k.arg == "skip_locked" for k in lock.keywords):
        return None
    node: ast.expr = call
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        node = node.func.value
    if isinstance(node, ast.Attribute) and node.attr == "objects" and isinstance(node.value, ast.Name):
        return node.value.id
    return None


def _called_name(call: ast.Call) -> str | None:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def _direct_locks(function: ast.AST) -> list[tuple[int, str]]:
    """(line, model or ``call:<name>``) of what ``function`` locks or calls, in source order."""
    inner = {id(call.func.value) for call in ast.walk(function)
             if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)}
    found = []
    for node in ast.walk(function):
        if not isinstance(node, ast.Call) or id(node) in inner:
            continue
        name, model = _called_name(node), _locked_model(node)
        if model is not None:
            found.append((node.lineno, model))
        elif name == "rows_key_share" and len(node.args) > 1 and isinstance(node.args[1], ast.Name):
            found.append((node.lineno, node.args[1].id))
        elif name == "department_chain" and any(
            k.arg == "lock" and isinstance(k.value, ast.Constant) and k.value.value is True for k in node.keywords
        ):
            found.append((node.lineno, "Department"))
        elif name in LOCKING_HELPERS:
            found.append((node.lineno, LOCKING_HELPERS[name]))
        elif name is not None:
            found.append((node.lineno, f"call:{name}"))
    return sorted(found)


def _transactional(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether ``function`` is a transaction (``@transaction.atomic``, ``@retry_on_deadlock()``) or
    opens one (``with transaction.atomic():``)."""
    marks = [ast.unparse(decorator) for decorator in function.decorator_list]
    marks += [ast.unparse(item.context_expr) for node in ast.walk(function) if isinstance(node, ast.With) for item in node.items]
    return any("atomic" in mark or "retry_on_deadlock" in mark for mark in marks)


def lock_order_breaks(source: str) -> list[str]:
    """Each function of ``source`` that locks a kind of ``LOCK_ORDER`` after a later kind, itself
    or through the functions of the same module it calls."""
    ranks = _kind_ranks()
    tree = ast.parse(source)
    functions = {node.name: node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}
    direct = {name: _direct_locks(node) for name, node in functions.items()}
    own = {name for name, node in functions.items() if _transactional(node)}
    memo: dict[str, list[str]] = {}

    def kinds(name: str, seen: frozenset[str]) -> list[str]:
        if name not in memo:
            out: list[str] = []
            for _line, what in direct[name]:
                callee = what.removeprefix("call:")
                if what.startswith("call:"):
                    # A helper that is a transaction of its own, called outside one, locks apart.
                    followed = callee in functions and callee not in seen and (callee not in own or name in own)
                    out += kinds(callee, seen | {name}) if followed else []
                elif what in ranks:
                    out.append(what)
            memo[name] = out
        return memo[name]

    breaks = []
    for name, node in functions.items():
        order = kinds(name, frozenset())
        for before, after in zip(order, order[1:], strict=False):
            if ranks[after] < ranks[before]:
                breaks.append(f"{node.lineno} {name}: {after} after {before}")
                break
    return breaks


def test_every_function_locks_in_the_global_order() -> None:
    wrong = [f"{path.relative_to(ROOT)}:{line}" for path in source_files() for line in lock_order_breaks(path.read_text())]
    assert wrong == []


def test_the_order_check_follows_helpers_of_the_module_and_ignores_skip_locked_and_other_transactions() -> None:
    source = """
def _clusters():
    return list(Cluster.objects.select_for_update().filter(pk__in=[1, 2]).order_by("pk"))
def right():
    allocation_lock(1)
    department_chain(department_id=1, lock=True)
    _clusters()
    Allocation.objects.select_for_update(skip_locked=True).filter(pk=2)
def wrong():
    _clusters()
    rows_key_share(connection, Department, [1])
@transaction.atomic
def _alone(pk):
    Cluster.objects.select_for_update().get(pk=pk)
def apart():
    _alone(1)
    department_chain(department_id=1, lock=False)
    department_chain(department_id=1, lock=True)
@transaction.atomic
def together():
    _alone(1)
    department_chain(department_id=1, lock=True)
"""
    assert lock_order_breaks(source) == ["9 wrong: Department after Cluster", "20 together: Department after Cluster"]


def test_the_lock_order_names_models_each_once() -> None:
    assert len(set(LOCK_ORDER)) == len(LOCK_ORDER)
    assert [apps.get_model(label)._meta.label for label in LOCK_ORDER] == list(LOCK_ORDER)


def test_docs_list_the_lock_order_as_the_code_holds_it() -> None:
    text = (ROOT / "docs" / "security.md").read_text()
    found = re.search(r"^As data \(`kernel\.locks\.LOCK_ORDER`\): (.+?)\.$", text, flags=re.MULTILINE | re.DOTALL)
    assert found is not None, "docs/security.md: the line 'As data (`kernel.locks.LOCK_ORDER`): ...' is missing"
    assert re.findall(r"`([a-z_]+\.[A-Za-z]+)`", found.group(1)) == list(LOCK_ORDER)


def test_the_rows_of_the_periodic_writers_refer_only_to_kinds_in_the_order() -> None:
    """``references_key_share`` refuses a kind without a place in the order at run time; this says
    so before any row is written."""
    for label in PERIODIC_ROWS:
        targets = {field.related_model._meta.label for field in apps.get_model(label)._meta.concrete_fields
                   if field.many_to_one and getattr(field, "db_constraint", True)}  # fmt: skip
        assert targets <= set(LOCK_ORDER), (label, targets - set(LOCK_ORDER))


# Helpers that lock a kind through a queryset built in the function (no ``Model.objects`` to read).
LOCKS_BUILT_IN: dict[str, str] = {"tenants/access.py:department_chain": "Department"}


def _lock_call(call: ast.Call) -> ast.Call | None:
    return next((c for c in _chain(call) if isinstance(c.func, ast.Attribute) and c.func.attr == "select_for_update"), None)


def _chain_base(call: ast.Call) -> ast.expr:
    node: ast.expr = call
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        node = node.func.value
    return node


def full_row_locks(source: str, path: str) -> list[str]:
    """``path:function model`` of each ``select_for_update`` without ``no_key=True`` on a kind of
    ``NO_KEY_KINDS`` (by ``Model.objects``, or any lock in a function of ``LOCKS_BUILT_IN``)."""
    kinds = {label.split(".")[1] for label in NO_KEY_KINDS}
    found = []
    for function in ast.walk(ast.parse(source)):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        where = f"{path}:{function.name}"
        for node in ast.walk(function):
            lock = _lock_call(node) if isinstance(node, ast.Call) else None
            if lock is None or any(k.arg == "no_key" and isinstance(k.value, ast.Constant) and k.value.value is True
                                   for k in lock.keywords):  # fmt: skip
                continue
            base = _chain_base(lock)
            model = (base.value.id if isinstance(base, ast.Attribute) and base.attr == "objects"
                     and isinstance(base.value, ast.Name) else LOCKS_BUILT_IN.get(where))  # fmt: skip
            if model in kinds:
                found.append(f"{where} {model}")
    return sorted(set(found))


def test_rows_that_writers_refer_to_are_locked_for_no_key_update_unless_listed_with_a_reason() -> None:
    found = [line for path in source_files()
             for line in full_row_locks(path.read_text(), path.relative_to(ROOT).as_posix())]
    assert [line for line in found if line.split()[0] not in FULL_ROW_LOCKS] == []
    used = {line.split()[0] for line in found}
    assert [where for where in FULL_ROW_LOCKS if where not in used] == []  # no stale entry
    assert all(reason.strip() for reason in FULL_ROW_LOCKS.values())


def test_the_strength_check_finds_full_locks_of_the_kinds_it_guards() -> None:
    source = """
def a():
    Allocation.objects.select_for_update(of=("self",), skip_locked=True).filter(pk=1)
    Project.objects.select_for_update(no_key=True).get(pk=1)
    Quota.objects.select_for_update().get(pk=1)
def department_chain(*, department_id, lock=False):
    rows = Department.objects.filter(pk=department_id)
    rows = rows.select_for_update()
def b():
    Cluster.objects.select_for_update(no_key=False).get(pk=1)
"""
    assert full_row_locks(source, "tenants/access.py") == [
        "tenants/access.py:a Allocation", "tenants/access.py:b Cluster", "tenants/access.py:department_chain Department",
    ]  # fmt: skip
