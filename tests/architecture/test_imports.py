"""The layout stays true: apps import one way, no module imports itself back, the node agent
stays free of Django, and no file grows past the size a reader can hold (docs/architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.architecture.imports import (
    EXTRA_ALLOWED,
    LAYERS,
    ROOT,
    STANDALONE,
    Import,
    app_of,
    module_cycles,
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
        Import("allocations.services", "allocations/services.py", 3, "delivery.outbox", nested=True),
        Import("delivery.outbox", "delivery/outbox.py", 9, "allocations.services", nested=False),
    ]
    assert upward_imports(imports) == ["allocations/services.py:3 imports delivery.outbox (inside a function)"]
    assert module_cycles(imports) == [["allocations.services", "delivery.outbox"]]


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
    offenders = []
    for path in sorted((ROOT / "cli").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            offenders += [f"{path.relative_to(ROOT)}:{node.lineno} {n}" for n in names if n.split(".")[0] in portal]
    assert offenders == []


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
