"""No function a reader cannot hold: at most 60 lines and at most 6 parameters in shipped code
(docs/architecture.md). The file cap (450 lines, ``test_imports``) alone let functions grow inside
files and pushed files under it by squeezing; this cap is the one that asks for a split.

How it counts, for every function and method, nested ones too (``ast``, nothing is imported):

- lines: from the ``def`` line to the function's last line (``end_lineno - lineno + 1``),
  decorators left out, the docstring and comments in (they are part of what a reader holds). A
  nested function's lines count in the function around it as well.
- parameters: positional-only, ordinary and keyword-only ones; ``self`` or ``cls`` as the first
  parameter is not counted (the object is not an input a caller chooses), nor are ``*args`` and
  ``**kwargs`` (a pass-through, not a list a reader has to hold).

One rule, as data rather than a list of names: a public keyword-only service or selector may
take up to ``KEYWORD_SERVICE_MAX`` (9) parameters. It applies only to a module-level function
whose name has the ``<entity>_<action>`` shape (lower case words joined by ``_``, no leading
``_``) and whose every parameter comes after ``*``. Its keyword signature is a contract named at
every call (views, tasks, the API, the CLI and hundreds of tests), so that a caller cannot mix
the arguments up however many there are; a value object in between would be one more name per
call for the same keywords. Where the callers are few and the arguments travel together, a value
object is still the better shape (``quota_window_create`` takes ``WindowTerms``). The line cap
applies to these services as to any function; a positional function, a method, a private one or
a nested one keeps the six-parameter cap.

A function over either cap is listed in ``EXCEPTIONS`` with the reason it cannot be split, or it
fails here; an exception that no longer matches a function over the cap fails too, so the list
only shrinks (at most five, each with its reason).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.architecture.imports import ROOT, source_files

MAX_FUNCTION_LINES = 60
MAX_PARAMETERS = 6
KEYWORD_SERVICE_MAX = 9  # a public keyword-only `<entity>_<action>` (the module's docstring)
SERVICE_NAME = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+")

# "path::qualified name" → why it stays over the cap.
EXCEPTIONS: dict[str, str] = {
    "audit/integrity/canonical.py::record_fields": (
        "the signature is the audit record's canonical form (version 1), one keyword per key of "
        "the hashed and signed record: a value object in between would be a second copy of the "
        "key list, which the chain's hashes and the offline verifier depend on"
    ),
    "cli/commands/audit.py::audit_export": (
        "a click command: click calls it with one keyword per option of `gpuportal audit export`, so its "
        "parameters are the command line's options, not a list a caller writes"
    ),
    "cli/commands/requests.py::request_create": (
        "a click command: click calls it with one keyword per option of `gpuportal request create`, so its "
        "parameters are the command line's options, not a list a caller writes"
    ),
}


@dataclass(frozen=True)
class Oversized:
    where: str  # path::qualified name
    lines: int
    parameters: int

    def __str__(self) -> str:
        return f"{self.where}: {self.lines} lines, {self.parameters} parameters"


def parameter_count(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    positional = [*node.args.posonlyargs, *node.args.args]
    if positional and positional[0].arg in ("self", "cls"):
        positional = positional[1:]
    return len(positional) + len(node.args.kwonlyargs)


def is_keyword_service(name: str, node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A module-level public function named ``<entity>_<action>`` whose every parameter is
    keyword-only (``name`` is its qualified name: a method or a nested function has a dot)."""
    arguments = node.args
    return (
        "." not in name
        and SERVICE_NAME.fullmatch(name) is not None
        and not arguments.posonlyargs
        and not arguments.args
        and arguments.vararg is None
    )


def parameter_cap(name: str, node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    return KEYWORD_SERVICE_MAX if is_keyword_service(name, node) else MAX_PARAMETERS


def _functions(node: ast.AST, prefix: str) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            yield prefix + child.name, child
            yield from _functions(child, f"{prefix}{child.name}.")
        elif isinstance(child, ast.ClassDef):
            yield from _functions(child, f"{prefix}{child.name}.")
        else:
            yield from _functions(child, prefix)


def oversized(source: str, path: str) -> list[Oversized]:
    """Every function of ``source`` over either cap, named ``path::qualified name``."""
    found = []
    for name, node in _functions(ast.parse(source, filename=path), ""):
        lines = (node.end_lineno or node.lineno) - node.lineno + 1
        parameters = parameter_count(node)
        if lines > MAX_FUNCTION_LINES or parameters > parameter_cap(name, node):
            found.append(Oversized(f"{path}::{name}", lines, parameters))
    return found


def _shipped_and_tooling_files() -> list[Path]:
    extra = [*sorted((ROOT / "bench").rglob("*.py")), ROOT / "manage.py"]
    return [*source_files(), *extra]


def stale_exceptions(exceptions: Mapping[str, object], found: list[Oversized]) -> list[str]:
    """The exceptions that match no function over the cap (split, renamed or removed since)."""
    return sorted(set(exceptions) - {item.where for item in found})


def project_oversized() -> list[Oversized]:
    return [
        item
        for path in _shipped_and_tooling_files()
        for item in oversized(path.read_text(), str(path.relative_to(ROOT)))
    ]


def test_no_function_is_over_the_cap() -> None:
    assert [str(item) for item in project_oversized() if item.where not in EXCEPTIONS] == []


def test_every_exception_is_still_needed_and_justified() -> None:
    assert stale_exceptions(EXCEPTIONS, project_oversized()) == []
    assert all(len(reason) > 40 for reason in EXCEPTIONS.values())
    assert len(EXCEPTIONS) <= 5


def _long_function(lines: int) -> str:
    body = "".join(f"    x{number} = {number}\n" for number in range(lines - 2))
    return f"def long():\n    '''Docstring.'''\n{body}"


def test_the_checker_finds_a_long_function_and_a_long_parameter_list() -> None:
    source = "\n".join([
        _long_function(61),
        "class Service:",
        "    def method(self, a, b, c, d, e, f, /, *, g): ...",
        "    @classmethod",
        "    def build(cls, a, b, c, d, e, f, *args, **kwargs): ...",
        "def outer():",
        "    def inner(a, b, c, d, e, f, g): ...",
    ])  # fmt: skip
    found = {item.where: (item.lines, item.parameters) for item in oversized(source, "sample.py")}
    assert found == {"sample.py::long": (61, 0), "sample.py::Service.method": (1, 7), "sample.py::outer.inner": (1, 7)}


def test_a_public_keyword_only_service_may_take_up_to_nine_parameters() -> None:
    source = "\n".join([
        "def quota_window_get(*, a, b, c, d, e, f, g, h, i): ...",  # at the rule's cap
        "def quota_window_set(*, a, b, c, d, e, f, g, h, i, j): ...",  # over it
        "def quota_window_move(a, b, c, d, e, f, g): ...",  # positional: six
        "def quota_window_fix(a, *, b, c, d, e, f, g): ...",  # one positional: six
        "def _quota_window_check(*, a, b, c, d, e, f, g): ...",  # private: six
        "def timeline(*, a, b, c, d, e, f, g): ...",  # not <entity>_<action>: six
        "def quota_window_wrap(*args, a, b, c, d, e, f, g): ...",  # *args, not keyword-only: six
        "class Window:",
        "    def window_set(self, *, a, b, c, d, e, f, g): ...",  # a method: six
        "def outer_call():",
        "    def inner_call(*, a, b, c, d, e, f, g): ...",  # nested: six
    ])  # fmt: skip
    found = {item.where.removeprefix("sample.py::") for item in oversized(source, "sample.py")}
    assert found == {"quota_window_set", "quota_window_move", "quota_window_fix", "_quota_window_check", "timeline",
                     "quota_window_wrap", "Window.window_set", "outer_call.inner_call"}


def test_a_keyword_only_service_keeps_the_line_cap() -> None:
    source = _long_function(61).replace("def long():", "def quota_window_long(*, a):")
    assert [str(item) for item in oversized(source, "sample.py")] == ["sample.py::quota_window_long: 61 lines, 1 parameters"]


def test_the_checker_leaves_a_function_at_the_cap_alone() -> None:
    source = _long_function(60) + "def six(a, b, c, d, e, f, *rest, **named): ...\n"
    assert oversized(source, "sample.py") == []


def test_a_stale_exception_is_found() -> None:
    found = oversized(_long_function(61), "sample.py")
    exceptions = {"sample.py::long": "too long to split, for the test", "sample.py::gone": "split since"}
    assert stale_exceptions(exceptions, found) == ["sample.py::gone"]
