"""The project's import graph, read from the source with ``ast`` (nothing is imported).

Every ``import`` statement counts, at module level or inside a function: an import hidden in a
function is still a dependency, and a cycle through one is still a cycle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# The portal's apps in their import order and the standalone packages: the one list, read here.
from gpuportal.packages import LAYERS as LAYERS
from gpuportal.packages import PACKAGES as PACKAGES
from gpuportal.packages import STANDALONE as STANDALONE

ROOT = Path(__file__).resolve().parents[2]

# What the standalone packages and the portal's apps may import of each other.
EXTRA_ALLOWED: dict[str, frozenset[str]] = {
    "agent": frozenset(),
    "cli": frozenset(),
    "kube_testenv": frozenset(),
    # The portal reads the agent's report schema (one document, validated on both sides).
    "telemetry": frozenset({"agent"}),
}
# The floors inside an app, from the bottom up: a module on one floor may import only its own floor
# and the floors below it. The app's Django entry points (``ENTRY_POINTS``, at the app's root) stand
# above every floor; any other module at the root is out of place (docs/architecture.md, "Inside
# allocations").
FLOORS: dict[str, tuple[str, ...]] = {
    "allocations": (
        "models", "catalogue", "quotas", "booking", "fair_share", "rules", "admission", "grants", "windows", "api",
    ),
}
ENTRY_POINTS = frozenset({"__init__", "apps", "admin", "urls", "tasks", "management"})


@dataclass(frozen=True)
class Import:
    source: str  # the importing module, dotted
    path: str  # its file, relative to the repository
    line: int
    target: str  # the imported module, dotted (a name imported from a package counts as the package)
    nested: bool  # inside a function or class body


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_files() -> Iterator[Path]:
    """Every shipped Python file of the packages above, migrations excluded (generated)."""
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" not in path.parts:
                yield path


def _resolve(module: str, node: ast.ImportFrom, *, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base[: len(base) - node.level + (1 if is_package else 0)]
    return ".".join([*base, *([node.module] if node.module else [])])


def imports_of(path: Path, known: set[str]) -> list[Import]:
    module = module_name(path)
    tree = ast.parse(path.read_text(), filename=str(path))
    nested_nodes: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            nested_nodes.update(id(child) for child in ast.walk(node) if child is not node)
    found: list[Import] = []
    rel = str(path.relative_to(ROOT))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = _resolve(module, node, is_package=path.name == "__init__.py")
            # ``from pkg import mod`` imports the module pkg.mod when there is one.
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        for target in targets:
            if target.split(".")[0] in PACKAGES:
                found.append(Import(module, rel, node.lineno, target, id(node) in nested_nodes))
    return found


def project_imports() -> list[Import]:
    files = list(source_files())
    known = {module_name(path) for path in files}
    return [item for path in files for item in imports_of(path, known)]


def app_of(module: str) -> str:
    return module.split(".")[0]


def floor_of(module: str) -> int | None:
    """The floor of a module of an app with floors (its index in FLOORS), ``len(floors)`` for the
    app's entry points and the app's package itself; None for any other app."""
    parts = module.split(".")
    floors = FLOORS.get(parts[0])
    if floors is None:
        return None
    if len(parts) > 1 and parts[1] in floors:
        return floors.index(parts[1])
    return len(floors)


def module_cycles(imports: list[Import]) -> list[list[str]]:
    """Strongly connected groups of two or more modules (Tarjan), each sorted."""
    known = {module_name(path) for path in source_files()}
    graph: dict[str, set[str]] = {}
    for item in imports:
        target = item.target
        while target not in known and "." in target:
            target = target.rsplit(".", 1)[0]
        if target in known and target != item.source:
            graph.setdefault(item.source, set()).add(target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups
