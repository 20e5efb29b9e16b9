"""One clock: every app reads "now" from ``kernel.clock`` (tests and the simulator move it), never
from the system clock directly. The standalone packages (the node agent, the CLI, the test control
plane) run outside the portal and keep the system clock."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.architecture.imports import LAYERS, ROOT, STANDALONE, source_files

CLOCK_MODULE = "kernel/clock.py"
FORBIDDEN_CALLS: frozenset[tuple[str, str]] = frozenset({
    ("timezone", "now"),
    ("timezone", "localdate"),
    ("timezone", "localtime"),
    ("datetime", "now"),
    ("datetime", "utcnow"),
    ("datetime", "today"),
    ("date", "today"),
})
"""(object, attribute) pairs that read the system clock; ``localtime`` only without an argument."""


def clock_reads(path: Path) -> list[str]:
    """Each place in ``path`` that reads the system clock instead of ``kernel.clock``: a call of a
    forbidden pair (``timezone.now()``, ``datetime.datetime.now(tz)``, ``dt.date.today()``…) or
    a reference to ``timezone.now`` handed on as a callable (``default=timezone.now``)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    relative = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    aliases = _aliases(tree)
    found = []
    called: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            called.add(id(node.func))
            pair = (_tail_name(node.func.value, aliases), node.func.attr)
            if pair in FORBIDDEN_CALLS and not (node.func.attr == "localtime" and node.args):
                found.append(f"{relative}:{node.lineno} calls {'.'.join(pair)}()")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in called:
            if (_tail_name(node.value, aliases), node.attr) == ("timezone", "now"):
                found.append(f"{relative}:{node.lineno} hands on timezone.now")
    return found


def _aliases(tree: ast.Module) -> dict[str, str]:
    """Names bound by ``import … as`` / ``from … import … as`` to what they stand for
    (``django_timezone`` → ``timezone``, ``dt`` → ``datetime``)."""
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            for name in node.names:
                if name.asname:
                    found[name.asname] = name.name.rsplit(".", 1)[-1]
    return found


def _tail_name(node: ast.expr, aliases: dict[str, str]) -> str:
    """``timezone`` for ``timezone``, ``django.utils.timezone`` and a name it was imported as;
    ``datetime`` for ``datetime.datetime`` and ``dt.datetime``; ``date`` for ``datetime.date``."""
    if isinstance(node, ast.Name):
        return aliases.get(node.id, node.id)
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def portal_files() -> list[Path]:
    return [path for path in source_files()
            if path.relative_to(ROOT).parts[0] in LAYERS and path.relative_to(ROOT).as_posix() != CLOCK_MODULE]


def test_no_app_reads_the_system_clock_but_kernel_clock() -> None:
    assert [place for path in portal_files() for place in clock_reads(path)] == []


def test_the_check_sees_every_way_of_reading_the_system_clock(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import datetime\nimport datetime as dt\nfrom django.utils import timezone\n"
        "a = timezone.now()\n"
        "b = datetime.datetime.now(datetime.UTC)\n"
        "c = dt.date.today()\n"
        "d = timezone.localdate()\n"
        "e = timezone.localtime()\n"
        "f = timezone.localtime(a)\n"  # converting a given instant is fine
        "g = dict(default=timezone.now)\n"
        "h = datetime.datetime.utcnow()\n"
        "from django.utils import timezone as django_timezone\n"
        "from datetime import date as day\n"
        "i = django_timezone.now()\n"
        "j = day.today()\n"
    )
    assert [place.split(":", 1)[1] for place in clock_reads(sample)] == [
        "4 calls timezone.now()",
        "5 calls datetime.now()",
        "6 calls date.today()",
        "7 calls timezone.localdate()",
        "8 calls timezone.localtime()",
        "11 calls datetime.utcnow()",
        "14 calls timezone.now()",
        "15 calls date.today()",
        "10 hands on timezone.now",
    ]


def test_the_standalone_packages_are_not_held_to_it() -> None:
    checked = {path.relative_to(ROOT).parts[0] for path in portal_files()}
    assert checked.isdisjoint(STANDALONE)
    assert "kernel" in checked and "allocations" in checked
