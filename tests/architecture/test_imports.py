"""The layout stays true: apps import one way, no module imports itself back, the node agent
stays free of Django, and no file grows past the size a reader can hold (docs/architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.architecture.imports import (
    ENTRY_POINTS,
    EXTRA_ALLOWED,
    FLOORS,
    LAYERS,
    ROOT,
    STANDALONE,
    Import,
    app_of,
    floor_of,
    module_cycles,
    module_name,
    project_imports,
    source_files,
)

MAX_LINES = 450


def upward_imports(imports: list[Import]) -> list[str]:
    """Each import of an app that is not below the importer in LAYERS (nor explicitly allowed)."""
    wrong = []
    for item in imports:
        source, target = app_of(item.source), app_of(item.target)
        if source == target or target in EXTRA_ALLOWED.get(source, frozenset()):
            continue
        if source in LAYERS and target in LAYERS and LAYERS.index(target) < LAYERS.index(source):
            continue
        where = " (inside a function)" if item.nested else ""
        wrong.append(f"{item.path}:{item.line} imports {item.target}{where}")
    return wrong


def test_apps_import_only_the_apps_below_them() -> None:
    assert upward_imports(project_imports()) == []


def test_no_module_imports_itself_back_through_others() -> None:
    assert module_cycles(project_imports()) == []


def test_the_check_sees_an_upward_import_and_a_cycle_even_inside_functions() -> None:
    imports = [
        Import("allocations.grants.services", "allocations/grants/services.py", 3, "delivery.outbox", nested=True),
        Import("delivery.outbox", "delivery/outbox.py", 9, "allocations.grants.services", nested=False),
    ]
    assert upward_imports(imports) == ["allocations/grants/services.py:3 imports delivery.outbox (inside a function)"]
    assert module_cycles(imports) == [["allocations.grants.services", "delivery.outbox"]]


def upward_floor_imports(imports: list[Import]) -> list[str]:
    """Each import, inside an app with floors, of a floor above the importer's."""
    wrong = []
    for item in imports:
        if app_of(item.source) != app_of(item.target):
            continue
        source, target = floor_of(item.source), floor_of(item.target)
        if source is None or target is None or target <= source:
            continue
        where = " (inside a function)" if item.nested else ""
        wrong.append(f"{item.path}:{item.line} imports {item.target}{where}")
    return wrong


def modules_off_the_floors() -> list[str]:
    """Modules at the root of an app with floors that are not one of its Django entry points."""
    return [
        str(path.relative_to(ROOT))
        for path in source_files()
        if (parts := module_name(path).split("."))[0] in FLOORS
        and len(parts) > 1
        and parts[1] not in FLOORS[parts[0]]
        and parts[1] not in ENTRY_POINTS
    ]


def test_inside_allocations_each_floor_imports_only_its_own_and_the_floors_below() -> None:
    assert upward_floor_imports(project_imports()) == []


def test_every_module_of_allocations_stands_on_a_floor_or_is_a_django_entry_point() -> None:
    assert modules_off_the_floors() == []
    for app, floors in FLOORS.items():
        assert all((ROOT / app / floor / "__init__.py").is_file() for floor in floors), app


def test_the_floor_check_sees_an_import_upward_and_lets_entry_points_import_anything() -> None:
    imports = [
        Import("allocations.quotas.algebra", "allocations/quotas/algebra.py", 7, "allocations.grants.services", nested=True),
        Import("allocations.grants.services", "allocations/grants/services.py", 5, "allocations.quotas.algebra", nested=False),
        Import("allocations.tasks", "allocations/tasks.py", 3, "allocations.windows.tick", nested=False),
        Import("allocations.models.windows", "allocations/models/windows.py", 4, "allocations.tasks", nested=False),
    ]
    assert upward_floor_imports(imports) == [
        "allocations/quotas/algebra.py:7 imports allocations.grants.services (inside a function)",
        "allocations/models/windows.py:4 imports allocations.tasks",
    ]


def forbidden_imports(package: str, forbidden: set[str]) -> list[str]:
    """Each absolute import in ``package`` of a top-level package in ``forbidden`` (a relative
    import stays inside the package)."""
    offenders = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            offenders += [f"{path.relative_to(ROOT)}:{node.lineno} {n}" for n in names if n.split(".")[0] in forbidden]
    return offenders


def test_the_placement_engine_imports_no_django() -> None:
    """``placement`` is the engine: clusters, requests and policies in, decisions out, with no
    database; the portal's ``allocations.booking`` builds its pictures from the inventory."""
    portal = {"django", "rest_framework", *STANDALONE, *(set(LAYERS) - {"placement"})}
    assert forbidden_imports("placement", portal) == []


def test_no_app_imports_the_test_control_plane_and_only_telemetry_reads_the_agent() -> None:
    users: dict[str, set[str]] = {package: set() for package in STANDALONE}
    for item in project_imports():
        source, target = app_of(item.source), app_of(item.target)
        if target in users and source != target:
            users[target].add(source)
    assert users == {"agent": {"telemetry"}, "cli": set(), "kube_testenv": set()}


def test_the_node_agent_imports_no_django() -> None:
    offenders = []
    for path in sorted((ROOT / "agent").rglob("*.py")):
        for line_no, line in enumerate(path.read_text().splitlines(), 1):
            stripped = line.strip()
            if stripped.startswith(("import django", "from django", "import rest_framework", "from rest_framework")):
                offenders.append(f"{path.relative_to(ROOT)}:{line_no}")
    assert offenders == []


def test_the_command_line_client_imports_no_django_and_nothing_of_the_portal() -> None:
    """cli/ works over the REST API only: it may import itself and third-party packages, never an
    app of the portal, the other standalone packages or Django."""
    portal = set(LAYERS) | {"agent", "kube_testenv", "django", "rest_framework"}
    assert forbidden_imports("cli", portal) == []


def _shipped_and_tooling_files() -> list[Path]:
    extra = [*sorted((ROOT / "bench").rglob("*.py")), ROOT / "manage.py"]
    return [*source_files(), *extra]


def test_no_source_file_is_longer_than_450_lines() -> None:
    long = {
        str(path.relative_to(ROOT)): count
        for path in _shipped_and_tooling_files()
        if (count := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


def test_docs_architecture_lists_the_apps_and_the_floors_in_the_order_the_checks_hold() -> None:
    """docs/architecture.md stays true to the code: its tables name every layer, standalone package
    and floor of ``allocations``, in the order of ``LAYERS``, ``STANDALONE`` and ``FLOORS``."""
    rows = [
        line.split("`")[1].rstrip("/")
        for line in (ROOT / "docs" / "architecture.md").read_text().splitlines()
        if line.startswith("| `")
    ]
    assert rows == [*LAYERS, *STANDALONE, *FLOORS["allocations"]]
