"""The API fuzz step of ``make test`` (``scripts/fuzz.sh``): schemathesis against the real app.

A fresh database ``<name>_fuzz`` next to the one of ``DATABASE_URL`` is migrated by the owner role,
given the demo data and the identities of ``tests/fuzz/identities.py``, and served by gunicorn on
127.0.0.1 connected as the application role (``GPUPORTAL_APP_DATABASE_URL``), tasks in-process.
Then schemathesis runs every operation of ``/api/schema/`` for each identity (``IDENTITIES``), with
a bounded number of examples per operation and a fixed seed. The step fails on any 5xx
(schemathesis' ``not_a_server_error``, and any 5xx in the server's access log) and on any answer
the schema does not describe (status code, content type, body). It prints, per operation and
identity, how many requests were sent and the share of the valid ones answered 2xx.

    python -m tests.fuzz.run [--max-examples N] [--seed S] [--identity NAME ...] [--keep DIR]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse, urlunparse

from tests.fuzz.bindings import EXCEPTIONS, MIN_VALID_SHARE, OPERATIONS, WRITE_METHODS
from tests.fuzz.hooks import SETUP as SETUP_IDENTITY

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SCHEMA_PATH = "/api/schema/"
TOKEN_OPERATION = "v1_auth_token_create"
NODE_REPORT_OPERATION = "v1_nodes_report_create"
ACCESS_TOKEN_REVOKE_OPERATION = "v1_auth_tokens_destroy"

CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance"
DEFAULT_MAX_EXAMPLES = 10
DEFAULT_SEED = 20260
WEBHOOK_HOST = "hooks.example.org"


@dataclass(frozen=True)
class Identity:
    """Who schemathesis is, and what it runs as them.

    ``coverage``: also schemathesis' coverage phase (each field's boundary and wrong values, and the
    undocumented methods of every path): for the platform admin, whom no permission check stops
    before a body is validated, and for the node agent; the other identities run the examples,
    fuzzing and stateful phases, which reach what their roles open.
    ``operations``: None for every operation of the schema (less ``skip``), else only these.
    ``node_token``: authenticate with the node token instead of the user's API token.
    ``examples_factor``: times the examples per operation (for a run of one operation).
    """

    name: str
    coverage: bool
    operations: tuple[str, ...] | None = None
    skip: tuple[str, ...] = ()
    node_token: bool = False
    examples_factor: int = 1


# Two lanes run side by side, each one identity after another. The node agent goes before the
# platform admin, who may revoke node tokens (its token among them); the identities of the other
# lane cannot. The token endpoint takes no credentials (its caller is anonymous) and costs a
# password hash per request: it is fuzzed once, as the platform admin. The node report takes a node
# token only: the identities with a user's token check that it gets 401 there. Revoking an API
# token may revoke the very token an identity runs with (ids are small): only the last identity of
# a lane runs it, so no identity after it loses its credentials.
LANES: list[list[Identity]] = [
    [
        Identity("node-agent", coverage=True, operations=(NODE_REPORT_OPERATION,), node_token=True, examples_factor=5),
        Identity("platform-admin", coverage=True, skip=(NODE_REPORT_OPERATION, ACCESS_TOKEN_REVOKE_OPERATION)),
        Identity("outsider", coverage=False, skip=(TOKEN_OPERATION,)),
    ],
    [
        Identity("researcher", coverage=False, skip=(TOKEN_OPERATION, ACCESS_TOKEN_REVOKE_OPERATION)),
        Identity("department-admin", coverage=False, skip=(TOKEN_OPERATION, ACCESS_TOKEN_REVOKE_OPERATION)),
        Identity("auditor", coverage=False, skip=(TOKEN_OPERATION,)),
    ],
]
IDENTITIES = [identity for lane in LANES for identity in lane]


def log(message: str) -> None:
    print(f"fuzz: {message}", flush=True)  # noqa: T201 - the step's own output


def out(text: str) -> None:
    print(text, flush=True)  # noqa: T201 - the step's own output


def database_url(url: str, name: str) -> str:
    return urlunparse(urlparse(url)._replace(path=f"/{name}"))


def database_recreate(owner_url: str, name: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(database_url(owner_url, "postgres"), autocommit=True) as connection:
        connection.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def run_python(env: dict[str, str], *args: str) -> str:
    result = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{result.stdout}{result.stderr}")
    return result.stdout


@contextmanager
def server(env: dict[str, str], port: int, workdir: Path, workers: int) -> Iterator[None]:
    """gunicorn on 127.0.0.1:port; its access log names the identity of each request (a header
    schemathesis sends) and its status."""
    error_log = workdir / "server.log"
    command = [
        str(BIN / "gunicorn"), "gpuportal.wsgi:application", "--bind", f"127.0.0.1:{port}",
        "--workers", str(workers), "--timeout", "120", "--access-logfile", str(workdir / "access.log"),
        # No request-line limit: gunicorn's own (4094 bytes) answers a longer query string with an
        # HTML 414 before the app sees it; the fuzz is about the app.
        "--limit-request-line", "0",
        # identity, method, status, seconds, path (last: it may contain spaces)
        "--access-logformat", "%({x-fuzz-identity}i)s %(m)s %(s)s %(L)s %(U)s",
    ]  # fmt: skip
    with error_log.open("ab") as errors:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=errors, stderr=errors)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{SCHEMA_PATH}?format=json", timeout=10) as answer:  # noqa: S310
                    (workdir / "schema.json").write_bytes(answer.read())
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"gunicorn did not start:\n{error_log.read_text(errors='replace')}") from None
                time.sleep(0.5)
        yield
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def toml_value(value: Any) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(key)} = {toml_value(item)}" for key, item in value.items()) + " }"
    return json.dumps(value)  # strings, numbers and lists of them are written alike in TOML and JSON


def config_text(prepared: dict[str, Any]) -> str:
    """schemathesis' configuration: dictionaries of values that exist or pass the service's checks
    (ids of the seeded objects, an end date within the allowed horizon, the demo sign-ins), bound to
    the parameters and body fields that take them with a probability, so generated requests often
    reach past the lookups and checks the schema cannot express; the rest stays generated."""
    ids: dict[str, list[int]] = prepared["ids"]
    now = datetime.datetime.now(datetime.UTC)
    dictionaries: dict[str, list[Any]] = {f"{name}_id": values or [1] for name, values in ids.items()}
    dictionaries.update({
        "ends_at": [(now + datetime.timedelta(days=days)).strftime("%Y-%m-%dT%H:%M:%SZ") for days in (7, 30)],
        "starts_at": [(now + datetime.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")],
        "quantity": [1, 2],
        "username": ["alice", "bob", "carol", "dave", "erin", "admin"],
        "password": ["demo"],
    })  # fmt: skip
    bindings: dict[str, tuple[str, float]] = {f"path.{name}_id": (f"{name}_id", 0.6) for name in ids}
    for name in ("department", "project", "flavor", "cluster"):
        bindings[f"query.{name}"] = (f"{name}_id", 0.3)
    for name in ("department", "project", "flavor", "cluster", "priority_class"):
        bindings[f"body.{name}"] = (f"{name}_id", 0.7)
    bindings.update({
        "body.parent": ("department_id", 0.7), "body.ends_at": ("ends_at", 0.8), "body.starts_at": ("starts_at", 0.6),
        "body.quantity": ("quantity", 0.7), "body.username": ("username", 0.7), "body.password": ("password", 0.7),
        "body.members[*]": ("username", 0.8),
    })  # fmt: skip
    lines = []
    for name, values in dictionaries.items():
        lines += [f"[dictionaries.{name}]", f"values = {toml_value(values)}", ""]
    lines.append("[parameters]")
    for key, (dictionary, probability) in bindings.items():
        lines.append(f"{json.dumps(key)} = {toml_value({'dictionary': dictionary, 'probability': probability})}")
    # The node token's own node, in the URL and (where schemathesis can set it: not in its coverage
    # phase, whose valid reports then get the 403 of another node's report) in the report.
    node_parameters = {"path.node_name": prepared["node"]["name"], "body.node_name": prepared["node"]["name"]}
    lines += ["", "[[operations]]", f'include-operation-id = "{NODE_REPORT_OPERATION}"',
              f"parameters = {toml_value(node_parameters)}", ""]  # fmt: skip
    return "\n".join(lines)


@dataclass
class Run:
    identity: str
    returncode: int
    seconds: float
    output: str


def schemathesis(
    identity: Identity, *, authorization: str, port: int, workdir: Path, max_examples: int, seed: int,
) -> Run:
    reports = workdir / "reports" / identity.name
    phases = "examples,coverage,fuzzing,stateful" if identity.coverage else "examples,fuzzing,stateful"
    command = [
        str(BIN / "schemathesis"), "--config-file", str(workdir / "schemathesis.toml"), "--no-color", "run",
        str(workdir / "schema.json"), "--url", f"http://127.0.0.1:{port}",
        "--checks", CHECKS, "--phases", phases, "--max-examples", str(max_examples * identity.examples_factor), "--seed", str(seed),
        "--generation-database", "none", "--workers", "1", "--continue-on-failure", "--request-timeout", "60",
        "--header", f"X-Fuzz-Identity: {identity.name}", "--header", f"Authorization: {authorization}",
        "--report", "junit,ndjson", "--report-dir", str(reports),
    ]  # fmt: skip
    for operation in identity.operations or ():
        command += ["--include-operation-id", operation]
    for operation in identity.skip:
        command += ["--exclude-operation-id", operation]
    started = time.monotonic()
    # The hooks bind the operation's actor's valid writes to real objects (tests/fuzz/bindings.py).
    hooks = {
        "SCHEMATHESIS_HOOKS": "tests.fuzz.hooks", "PYTHONPATH": str(ROOT), "GPUPORTAL_FUZZ_IDENTITY": identity.name,
        "GPUPORTAL_FUZZ_PREPARED": str(workdir / "prepared.json"), "GPUPORTAL_FUZZ_URL": f"http://127.0.0.1:{port}",
    }  # fmt: skip
    # One worker per run (several runs at once): schemathesis' threads can trip CPython 3.11's
    # "AST constructor recursion depth mismatch" in hypothesis.
    result = subprocess.run(command, cwd=workdir, capture_output=True, text=True, env={**os.environ, **hooks, "NO_COLOR": "1"})
    output = result.stdout + result.stderr
    reports.mkdir(parents=True, exist_ok=True)
    (reports / "output.txt").write_text(output, encoding="utf-8")
    return Run(identity.name, result.returncode, time.monotonic() - started, output)


@dataclass
class Tally:
    statuses: Counter[int] = field(default_factory=Counter)
    seconds: float = 0.0
    valid: int = 0  # schemathesis' valid ("positive") requests, and how many were answered 2xx
    valid_ok: int = 0

    @property
    def total(self) -> int:
        return sum(self.statuses.values())

    def share(self, low: int, high: int) -> int:
        return sum(count for status, count in self.statuses.items() if low <= status < high)


def operation_matchers(schema_file: Path) -> list[tuple[re.Pattern[str], str, str]]:
    """(path regex, method, operation id) for every operation of the schema, the most specific path
    first: a literal segment wins over a parameter at the same place, as in the URL resolver
    (``/quota-windows/shrinks/`` is not the window ``shrinks``)."""
    schema = json.loads(schema_file.read_text(encoding="utf-8"))
    matchers = []
    for template in sorted(schema["paths"], key=specificity):
        pattern = re.compile("^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template)) + "$")
        for method, operation in schema["paths"][template].items():
            if isinstance(operation, dict) and "operationId" in operation:
                matchers.append((pattern, method.upper(), str(operation["operationId"])))
    return matchers


def specificity(template: str) -> tuple[int, ...]:
    """Sorts path templates so that, segment by segment, a literal comes before a parameter."""
    return tuple(1 if segment.startswith("{") else 0 for segment in template.split("/"))


def tally(access_log: Path, matchers: list[tuple[re.Pattern[str], str, str]]) -> dict[tuple[str, str], Tally]:
    """(operation id, identity) → statuses answered, from the access log."""
    found: dict[tuple[str, str], Tally] = defaultdict(Tally)
    for line in access_log.read_text(encoding="utf-8", errors="replace").splitlines():
        parts = line.split(" ", 4)
        if len(parts) != 5 or not parts[2].isdigit():
            continue
        identity, method, status, seconds, path = parts
        operation = next((op for pattern, verb, op in matchers if verb == method and pattern.match(path)), None)
        # Probes of undocumented methods (and the schema itself) share one row.
        key = (operation or "(undocumented method or path)", identity)
        found[key].statuses[int(status)] += 1
        found[key].seconds += float(seconds)
    return found


def count_valid(found: dict[tuple[str, str], Tally], reports: Path, identity: str, schema_file: Path) -> None:
    """Add to ``found`` how schemathesis' valid ("positive") requests were answered, from its NDJSON
    report of one identity's run (each case with its generation mode and its response)."""
    schema = json.loads(schema_file.read_text(encoding="utf-8"))
    operation_ids = {
        (method.upper(), path): operation["operationId"]
        for path, methods in schema["paths"].items()
        for method, operation in methods.items()
        if isinstance(operation, dict) and "operationId" in operation
    }
    for report in reports.glob("*.ndjson"):
        with report.open(encoding="utf-8") as lines:
            for line in lines:
                if not line.startswith('{"ScenarioFinished"'):
                    continue
                recorder = json.loads(line)["ScenarioFinished"].get("recorder") or {}
                interactions = recorder.get("interactions") or {}
                for case_id, case in (recorder.get("cases") or {}).items():
                    value = case.get("value") or {}
                    mode = ((value.get("meta") or {}).get("generation") or {}).get("mode")
                    response = (interactions.get(case_id) or {}).get("response")
                    operation = operation_ids.get((value.get("method"), value.get("path")))
                    if mode != "positive" or not response or operation is None:
                        continue
                    counts = found[(operation, identity)]
                    counts.valid += 1
                    counts.valid_ok += 200 <= response["status_code"] < 300


def summary(found: dict[tuple[str, str], Tally], identities: list[str]) -> list[str]:
    """One line per operation: for each identity, the requests sent and the share of the valid ones
    answered 2xx (the rest of the valid ones met a rule the schema cannot state, or an object of
    another department), and any 5xx."""
    lines = [f"{'operation':42}" + "".join(f"{name[:16]:>17}" for name in identities)]
    for operation in sorted({operation for operation, _ in found}):
        cells = []
        for identity in identities:
            counts = found.get((operation, identity))
            if counts is None or counts.total == 0:
                cells.append(f"{'-':>17}")
                continue
            accepted = f"{100 * counts.valid_ok // counts.valid}%" if counts.valid else "-"
            cell = f"{counts.total} {accepted}"
            if counts.share(500, 600):
                cell += f" 5xx:{counts.share(500, 600)}"
            cells.append(f"{cell:>17}")
        lines.append(f"{operation[:42]:42}" + "".join(cells))
    return lines


@dataclass
class OperationTable:
    lines: list[str]
    short: list[str]  # write operations under MIN_VALID_SHARE (not in EXCEPTIONS), and why
    valid: int = 0
    valid_ok: int = 0


def operation_table(found: dict[tuple[str, str], Tally], schema_file: Path) -> OperationTable:
    """One row per operation (method and path template): requests of every identity, answered 2xx,
    4xx and 5xx; for a write, its actor's valid requests and how many were answered 2xx, held to
    ``MIN_VALID_SHARE`` unless ``bindings.EXCEPTIONS`` names the operation."""
    schema = json.loads(schema_file.read_text(encoding="utf-8"))
    rows = [
        (method, template, str(operation["operationId"]))
        for template, methods in sorted(schema["paths"].items())
        for method, operation in methods.items()
        if isinstance(operation, dict) and "operationId" in operation
    ]
    header = f"{'operation':64}{'requests':>9}{'2xx':>6}{'4xx':>6}{'5xx':>5}  {'actor':16}{'valid':>6}{'2xx':>5}{'share':>7}"
    table = OperationTable([header], [])
    for method, template, operation_id in rows:
        counts = Tally()
        for (operation, identity), tally_ in found.items():
            if operation == operation_id and identity != SETUP_IDENTITY:
                counts.statuses.update(tally_.statuses)
        line = (f"{method.upper() + ' ' + template:64}{counts.total:>9}{counts.share(200, 300):>6}"
                f"{counts.share(400, 500):>6}{counts.share(500, 600):>5}")  # fmt: skip
        binding = OPERATIONS.get(operation_id)
        if method in WRITE_METHODS and binding is not None:
            actor = found.get((operation_id, binding.actor), Tally())
            share = actor.valid_ok / actor.valid if actor.valid else 0.0
            table.valid += actor.valid
            table.valid_ok += actor.valid_ok
            line += f"  {binding.actor:16}{actor.valid:>6}{actor.valid_ok:>5}{share:>7.0%}"
            if operation_id in EXCEPTIONS:
                line += "  (exception)"
            elif share < MIN_VALID_SHARE:
                line += "  < " + f"{MIN_VALID_SHARE:.0%}"
                table.short.append(f"{method.upper()} {template} ({operation_id}) as {binding.actor}: "
                                   f"{actor.valid_ok} of {actor.valid} valid requests answered 2xx")
        elif method in WRITE_METHODS:
            line += "  (no binding)"
            table.short.append(f"{method.upper()} {template} ({operation_id}): no binding in tests/fuzz/bindings.py")
        table.lines.append(line)
    setup = sum(tally_.total for (_, identity), tally_ in found.items() if identity == SETUP_IDENTITY)
    table.lines.append(f"{'(setup: objects made for bound requests)':64}{setup:>9}")
    return table


def server_errors(found: dict[tuple[str, str], Tally]) -> list[str]:
    return [
        f"{operation} as {identity}: {count} x {status}"
        for (operation, identity), counts in sorted(found.items())
        for status, count in sorted(counts.statuses.items())
        if status >= 500
    ]


def tracebacks(server_log: Path, limit: int = 10) -> str:
    """The distinct tracebacks in the server's log: Django logs each 500 as "Internal Server Error:
    <path>" and its traceback; a log line of another request ends it."""
    blocks: dict[str, str] = {}
    current: list[str] | None = None
    lines = server_log.read_text(encoding="utf-8", errors="replace").splitlines()
    for line in lines:  # JSON logs (the default, kernel/logs): each 500 is one record with its traceback
        if line.startswith("{") and "Internal Server Error:" in line:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            trace = str(record.get("exc_info") or record.get("exception") or "")
            blocks.setdefault(trace.strip().rpartition("\n")[2] or record.get("message", ""),
                              f"{record.get('message', '')}\n{trace}")
    for line in [*lines, "[end]"]:
        if current is not None and (line.startswith("[") or re.match(r"^[A-Z][A-Za-z ]+: /", line)):
            blocks.setdefault(current[-1] if len(current) > 1 else current[0], "\n".join(current))
            current = None
        if line.startswith("Internal Server Error:"):
            current = [line]
        elif current is not None:
            current.append(line)
    return "\n\n".join(list(blocks.values())[:limit])


def warnings(output: str) -> list[str]:
    """schemathesis' warnings (operations that mostly got 4xx to valid data, or only 401/403/404)."""
    block = output.rpartition("\nWarnings:\n")[2].partition("\n\n")[0] if "\nWarnings:\n" in output else ""
    return [line.strip() for line in block.splitlines() if line.strip()]


def failures(output: str) -> str:
    """schemathesis' report of failures and errors, without its progress lines."""
    start = min((index for index in (output.find("=== FAILURES"), output.find("=== ERRORS")) if index >= 0), default=-1)
    return output[start:] if start >= 0 else output[-4000:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-examples", type=int, default=DEFAULT_MAX_EXAMPLES, help="per operation and phase")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--identity", action="append", choices=[identity.name for identity in IDENTITIES])
    parser.add_argument("--server-workers", type=int, default=2)
    parser.add_argument("--keep", type=Path, help="copy the logs, schema and reports to this folder")
    args = parser.parse_args(argv)

    owner_url = os.environ.get("DATABASE_URL", "")
    app_url = os.environ.get("GPUPORTAL_APP_DATABASE_URL", "")
    if not owner_url.startswith("postgres") or not app_url.startswith("postgres"):
        log("needs DATABASE_URL (the owner) and GPUPORTAL_APP_DATABASE_URL (the application role) on PostgreSQL")
        return 2
    name = urlparse(owner_url).path.lstrip("/") + "_fuzz"
    identities = [identity for identity in IDENTITIES if not args.identity or identity.name in args.identity]
    workdir = Path(tempfile.mkdtemp(prefix="gpuportal-fuzz-"))
    started = time.monotonic()
    try:
        key_file = workdir / "audit-signing-key.pem"
        base = {key: value for key, value in os.environ.items() if key != "CELERY_BROKER_URL"}  # tasks in-process
        base.update({
            "DJANGO_SETTINGS_MODULE": "gpuportal.settings", "GPUPORTAL_DEBUG": "false",
            "GPUPORTAL_SECRET_KEY": secrets.token_urlsafe(48), "GPUPORTAL_VAR_DIR": str(workdir / "var"),
            "GPUPORTAL_DB_RUNTIME_GRANT_TRUNCATE": "false", "GPUPORTAL_LOG_LEVEL": "ERROR",
            # The bound webhooks' host (nothing is delivered: tasks run in-process, no dispatcher).
            "GPUPORTAL_WEBHOOK_ALLOWED_HOSTS": WEBHOOK_HOST,
        })  # fmt: skip
        owner = {**base, "DATABASE_URL": database_url(owner_url, name), "GPUPORTAL_APP_DATABASE_URL": database_url(app_url, name)}
        run_python(owner, "manage.py", "audit_keys", "--generate", str(key_file))
        owner["GPUPORTAL_AUDIT_SIGNING_KEY_FILE"] = str(key_file)
        app = {**owner, "DATABASE_URL": database_url(app_url, name)}

        database_recreate(owner_url, name)
        run_python(owner, "manage.py", "migrate", "--noinput", "-v0")
        run_python(owner, "manage.py", "seed_demo")
        prepared = json.loads(run_python(owner, "-m", "tests.fuzz.identities"))
        (workdir / "schemathesis.toml").write_text(config_text(prepared), encoding="utf-8")
        (workdir / "prepared.json").write_text(json.dumps(prepared), encoding="utf-8")
        (workdir / "var" / "static").mkdir(parents=True, exist_ok=True)  # whitenoise's, else it warns
        log(f"database {name} migrated and seeded by the owner role in {time.monotonic() - started:.0f}s")

        port = free_port()
        with server(app, port, workdir, args.server_workers):
            log(f"gunicorn on 127.0.0.1:{port} as the application role; schemathesis for "
                f"{', '.join(identity.name for identity in identities)}, {args.max_examples} examples per operation")

            def one(identity: Identity) -> Run:
                if identity.node_token:
                    authorization = f"Bearer {prepared['node']['token']}"
                else:
                    authorization = f"Token {prepared['users'][identity.name]}"
                run = schemathesis(
                    identity, authorization=authorization, port=port, workdir=workdir,
                    max_examples=args.max_examples, seed=args.seed,
                )  # fmt: skip
                log(f"{identity.name}: schemathesis exit {run.returncode} after {run.seconds:.0f}s")
                return run

            def lane(members: list[Identity]) -> list[Run]:
                return [one(identity) for identity in members if identity in identities]

            with ThreadPoolExecutor(max_workers=len(LANES)) as pool:
                runs = [run for runs_of_lane in pool.map(lane, LANES) for run in runs_of_lane]

        found = tally(workdir / "access.log", operation_matchers(workdir / "schema.json"))
        for run in runs:
            count_valid(found, workdir / "reports" / run.identity, run.identity, workdir / "schema.json")
        print("requests per operation and identity, and the share of the valid ones answered 2xx:", flush=True)  # noqa: T201
        print("\n".join(summary(found, [identity.name for identity in identities])), flush=True)  # noqa: T201
        operations = operation_table(found, workdir / "schema.json")
        out("\nrequests per operation (all identities; setup: the objects made for bound requests), and its actor's "
            "valid requests (tests/fuzz/bindings.py) with those answered 2xx:")
        print("\n".join(operations.lines), flush=True)  # noqa: T201
        errors = server_errors(found)
        failed = [run for run in runs if run.returncode != 0]
        # The share of valid writes is held only when every identity ran (a partial run lacks actors).
        short = operations.short if len(identities) == len(IDENTITIES) else []
        for run in runs:
            for line in warnings(run.output):
                log(f"{run.identity}: {line}")
        for run in failed:
            print(f"\n---- schemathesis as {run.identity}:\n{failures(run.output)}", flush=True)  # noqa: T201
        if short:
            out("\n---- write operations whose actor's valid requests were mostly refused or never sent:\n" + "\n".join(short))
        if errors:
            print("\n---- 5xx answers:\n" + "\n".join(errors), flush=True)  # noqa: T201
            print(f"\n---- server tracebacks:\n{tracebacks(workdir / 'server.log')}", flush=True)  # noqa: T201
        total = sum(counts.total for counts in found.values())
        log(f"{total} requests in {time.monotonic() - started:.0f}s; {len(errors)} operation(s) answered 5xx; "
            f"{operations.valid_ok} of {operations.valid} valid writes answered 2xx, {len(short)} write operation(s) under "
            f"{MIN_VALID_SHARE:.0%}; schemathesis failed as: {', '.join(run.identity for run in failed) or 'nobody'}")
        return 1 if errors or failed or short else 0
    finally:
        if args.keep is not None:
            shutil.copytree(workdir, args.keep, dirs_exist_ok=True)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
