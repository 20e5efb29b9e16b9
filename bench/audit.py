"""Benchmark of the audit log on PostgreSQL (a benchmark, not a timed test).

    DATABASE_URL=postgres://OWNER:PW@HOST:PORT/DB [GPUPORTAL_APP_DATABASE_URL=postgres://APP:PW@...] \\
        nice .venv/bin/python bench/audit.py [--events 1000000] [--writers 8] [--append-each 250] \\
        [--rounds 1] [--append-only]

It creates a scratch database next to DB (``<DB>_audit_bench``, dropped first; the owner needs
CREATEDB), migrates it, and prints:

1. append throughput of ``audit_record`` with N concurrent writer processes (each event its own
   transaction, as services write them; timed from all writers connected to the last commit), as
   the application role when its URL is given, against the same writers running the same
   transactions without an event (one INSERT each, no chain lock: what the machine allows them at
   that moment) and with all of ``audit_record``'s own work but one INSERT instead of the chain step
   (what is left when the chain costs nothing); rounds alternate the three, so all see the same
   load on a shared machine; and the server's rate of commits made one at a time (the bound of
   anything that serialises commits);
2. the time to bulk-load the log up to ``--events`` (COPY of generated, correctly chained events)
   and to publish the first checkpoint over all of them (which replays and checks every event);
3. export of all events as JSON Lines, against ``COPY (SELECT record ...) TO STDOUT`` of the same
   rows in the same run (ratio of throughputs, target >= 0.5), and the peak memory of each;
4. a full export bundle, and its offline verification (``python -m audit.verify``; target < 20 s).

``--append-only`` stops after step 1. Each measured step runs in a fresh child process, so peak
memory (ru_maxrss) is its own; the append steps are in ``bench/audit_append.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[0] = str(ROOT)  # this file is bench/audit.py: never let it shadow the audit package

import argparse  # noqa: E402
import base64  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import resource  # noqa: E402
import secrets  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402
from urllib.parse import urlparse, urlunparse  # noqa: E402

from bench.audit_append import child_append, child_bare_table, child_commits, django_setup  # noqa: E402

BENCH_SUFFIX = "_audit_bench"


def say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def peak_mib() -> float:
    """This process's own peak resident memory (VmHWM, which, unlike ru_maxrss, starts afresh at exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cpu_seconds() -> float:
    return time.process_time()


def with_database(url: str, name: str) -> str:
    parsed = urlparse(url)
    return urlunparse(parsed._replace(path="/" + name))


# -- steps, each run in its own child process ----------------------------------------------------

def child_migrate(url: str) -> dict[str, Any]:
    django_setup(url)
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return {}


def child_load(url: str, total: int) -> dict[str, Any]:
    """Append generated events up to ``total`` with COPY, chained exactly as ``audit_record`` does."""
    django_setup(url)
    import datetime

    from django.db import connection

    from audit.actions import all_actions
    from audit.integrity.canonical import GENESIS_HASH, TIME_FORMAT, canonical_json, leaf_hash, record_fields
    from audit.models import AuditEvent

    last = AuditEvent.objects.order_by("-seq").first()
    assert last is not None
    seq, prev_hash, moment = last.seq, last.hash, last.occurred_at
    heads: dict[int, tuple[int, str]] = {}
    for department_id, department_seq, hash_ in AuditEvent.objects.filter(department_id__isnull=False).order_by(
            "seq").values_list("department_id", "department_seq", "hash"):
        heads[int(department_id or 0)] = (int(department_seq or 0), hash_)
    codes = all_actions()
    generator = random.Random(5)  # noqa: S311 - reproducible fake data
    started = time.perf_counter()
    columns = ("seq, occurred_at, actor_id, actor_username, action, target_type, target_id, department_id, "
               "department_seq, outcome, request_id, hash, record")
    connection.ensure_connection()
    raw = connection.connection
    assert raw is not None
    with raw.cursor() as cursor, cursor.copy(f"COPY audit_event ({columns}) FROM STDIN") as copy:
        while seq < total:
            seq += 1
            moment += datetime.timedelta(microseconds=generator.randint(1, 2000))
            action = codes[generator.randrange(len(codes))]
            department_id = generator.randint(1, 60) if generator.random() < 0.9 else None
            department_seq, department_prev = None, None
            if department_id is not None:
                size, head = heads.get(department_id, (0, GENESIS_HASH))
                department_seq, department_prev = size + 1, head
            actor = generator.randint(1, 2000)
            target_id = str(generator.randint(1, 10**6))
            request_id = secrets.token_hex(16)
            data = canonical_json(record_fields(
                seq=seq, prev_hash=prev_hash, occurred_at=moment.strftime(TIME_FORMAT), nonce=secrets.token_hex(16),
                actor_id=actor, actor_username=f"user{actor}", action=action.code, action_number=action.number,
                target_type="allocations.allocation", target_id=target_id,
                department_id=department_id, department_seq=department_seq, department_prev_hash=department_prev,
                outcome="success", before={"state": "pending"}, after={"state": "approved"},
                details={"comment": "approved within quota", "quantity": generator.randint(1, 8)},
                request_id=request_id, source_ip="10.0.0.1", user_agent="Mozilla/5.0 (bench)",
            ))
            hash_ = leaf_hash(data).hex()
            copy.write_row((seq, moment, actor, f"user{actor}", action.code, "allocations.allocation", target_id,
                            department_id, department_seq, "success", request_id, hash_, data.decode("ascii")))
            if department_id is not None:
                heads[department_id] = (department_seq or 0, hash_)
            prev_hash = hash_
    raw.commit()
    return {"seconds": time.perf_counter() - started, "events": seq}


def child_checkpoint(url: str) -> dict[str, Any]:
    django_setup(url)
    from audit.checkpoints import checkpoint_publish

    started = time.perf_counter()
    checkpoint = checkpoint_publish()
    return {"cpu": cpu_seconds(), "seconds": time.perf_counter() - started, "size": checkpoint.size, "number": checkpoint.number,
            "peak_mib": peak_mib()}


def _sink(chunks: Any) -> int:
    written = 0
    with open(os.devnull, "wb") as devnull:
        for chunk in chunks:
            devnull.write(chunk)
            written += len(chunk)
    return written


def child_copy(url: str, size: int) -> dict[str, Any]:
    django_setup(url)
    from django.db import connection

    connection.ensure_connection()
    raw = connection.connection
    assert raw is not None
    started, cpu = time.perf_counter(), cpu_seconds()
    with raw.cursor() as cursor, cursor.copy(
        "COPY (SELECT record FROM audit_event WHERE seq <= %s ORDER BY seq) TO STDOUT", [size]
    ) as copy:
        written = _sink(bytes(block) for block in copy)
    return {"seconds": time.perf_counter() - started, "cpu": cpu_seconds() - cpu, "bytes": written,
            "peak_mib": peak_mib()}


def child_export(url: str, size: int, output: str, path: str) -> dict[str, Any]:
    django_setup(url)
    from audit.export import audit_export_bundle, audit_export_csv, audit_export_jsonl
    from audit.models import AuditCheckpoint
    from audit.selectors import AuditFilters

    started, cpu = time.perf_counter(), cpu_seconds()
    if output == "jsonl":
        written = _sink(audit_export_jsonl(filters=AuditFilters(), upto=size))
    elif output == "csv":
        written = _sink(audit_export_csv(filters=AuditFilters(), upto=size))
    else:
        checkpoint = AuditCheckpoint.objects.order_by("-number").first()
        assert checkpoint is not None and checkpoint.size == size
        written = 0
        with open(path, "wb") as handle:
            for chunk in audit_export_bundle(filters=AuditFilters(), checkpoint=checkpoint):
                handle.write(chunk)
                written += len(chunk)
    return {"seconds": time.perf_counter() - started, "cpu": cpu_seconds() - cpu, "bytes": written,
            "peak_mib": peak_mib()}


def child_verify(path: str, key: str) -> dict[str, Any]:
    from audit.verify import main

    started, cpu = time.perf_counter(), cpu_seconds()
    status = main([path, "--key", key])
    return {"seconds": time.perf_counter() - started, "cpu": cpu_seconds() - cpu, "status": status,
            "peak_mib": peak_mib()}


def child_live_verify(url: str) -> dict[str, Any]:
    django_setup(url)
    from audit.verification import audit_log_verify

    started = time.perf_counter()
    report = audit_log_verify()
    return {"cpu": cpu_seconds(), "seconds": time.perf_counter() - started, "events": report.events, "peak_mib": peak_mib()}


CHILDREN: dict[str, Callable[..., dict[str, Any]]] = {
    "migrate": child_migrate, "append": child_append, "bare-table": child_bare_table, "commits": child_commits, "load": child_load, "checkpoint": child_checkpoint,
    "copy": child_copy, "export": child_export, "verify": child_verify, "live-verify": child_live_verify,
}


def run_child(name: str, *arguments: Any, env: dict[str, str]) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, __file__, "--child", name, json.dumps(arguments)],
        capture_output=True, text=True, env=env, cwd=ROOT, check=False,
    )
    if result.returncode != 0:
        raise SystemExit(f"step {name} failed:\n{result.stdout}\n{result.stderr}")
    figures: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return figures


# -- the driver ---------------------------------------------------------------------------------

def scratch_database(owner_url: str) -> str:
    import psycopg

    name = (urlparse(owner_url).path.lstrip("/") or "gpuportal") + BENCH_SUFFIX
    with psycopg.connect(owner_url, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}"')
        connection.execute(f'CREATE DATABASE "{name}"')
    return name


def main() -> None:
    arguments = _arguments()
    owner_url = os.environ.get("DATABASE_URL", "")
    if not owner_url.startswith("postgres"):
        raise SystemExit("set DATABASE_URL to the owner's postgres:// URL")
    name = scratch_database(owner_url)
    owner = with_database(owner_url, name)
    app_url = os.environ.get("GPUPORTAL_APP_DATABASE_URL")
    writer_url = with_database(app_url, name) if app_url else owner

    from audit.integrity.keys import signing_key_generate

    key = signing_key_generate("bench.gpuportal/audit")
    workdir = Path(tempfile.mkdtemp(prefix="audit-bench-"))
    env = _child_env(key, workdir)
    say(f"audit log benchmark: database {name}, {arguments.events:,} events, {arguments.writers} writers")
    run_child("migrate", owner, env=env)
    measure_append(arguments, owner, writer_url, env)
    if not arguments.append_only:
        measure_log(arguments, owner, env, workdir, key)
    if not arguments.keep:
        import shutil

        import psycopg

        shutil.rmtree(workdir, ignore_errors=True)
        with psycopg.connect(owner_url, autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}"')


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--append-each", type=int, default=250)
    parser.add_argument("--rounds", type=int, default=1, help="repeat the append measurement (alternating with "
                        "the same writers' transactions without an event)")
    parser.add_argument("--live-verify", action="store_true", help="also time manage.py audit_verify's check")
    parser.add_argument("--append-only", action="store_true",
                        help="measure the append (and the commit ceiling) only, not the load, exports and verification")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database and files")
    return parser.parse_args()


def _child_env(key: Any, workdir: Path) -> dict[str, str]:
    """The children's environment: the portal's production settings, signing with ``key``."""
    seed = key.private_key.private_bytes_raw()
    return {
        **os.environ, "DJANGO_SETTINGS_MODULE": "gpuportal.settings", "GPUPORTAL_DEBUG": "false",
        "GPUPORTAL_SECRET_KEY": secrets.token_urlsafe(48), "GPUPORTAL_AUDIT_ORIGIN": key.name,
        "GPUPORTAL_AUDIT_SIGNING_KEY": base64.b64encode(seed).decode(),
        "GPUPORTAL_AUDIT_CHECKPOINT_DIR": str(workdir / "checkpoints"), "GPUPORTAL_VAR_DIR": str(workdir),
    }


def measure_append(arguments: argparse.Namespace, owner: str, writer_url: str, env: dict[str, str]) -> None:
    """Step 1: the append with, without the event and without the chain step; the commit ceiling."""
    run_child("bare-table", owner, True, env=env)
    rates: dict[str, list[float]] = {"event": [], "unchained": [], "bare": []}
    for _ in range(arguments.rounds):  # alternated, so that all see the same load on a shared machine
        for mode in rates:
            result = run_child("append", writer_url, arguments.writers, arguments.append_each, mode, env=env)
            rates[mode].append(result["events"] / result["seconds"])
            if mode == "event" and not result["gapless"]:
                raise SystemExit("the chain has a gap")
        event, unchained, bare = (rates[mode][-1] for mode in rates)
        say(f"append: {arguments.writers} concurrent writers x {arguments.append_each} transactions, one event each: "
            f"{event:,.0f} events/s; gapless; the same writers without the event (one INSERT each): {bare:,.0f} "
            f"transactions/s, ratio to that {event / bare:.2f}; with all of audit_record's work but an INSERT "
            f"instead of the chain step (no lock): {unchained:,.0f} transactions/s")
    run_child("bare-table", owner, False, env=env)
    event, unchained, bare = (statistics.median(rates[mode]) for mode in rates)
    say(f"append, median of {arguments.rounds}: {event:,.0f} events/s; without the event: {bare:,.0f} transactions/s, "
        f"ratio {event / bare:.2f}; without the chain step: {unchained:,.0f} transactions/s, ratio "
        f"{event / unchained:.2f}; target 1,000 events/s: {'met' if event >= 1000 else 'not met'}")
    commits = run_child("commits", owner, 200, env=env)
    say(f"ceiling: one-row transactions committed one at a time on this server: "
        f"{commits['commits'] / commits['seconds']:,.0f} commits/s (the chain lock serialises commits)")


def measure_log(arguments: argparse.Namespace, owner: str, env: dict[str, str], workdir: Path, key: Any) -> None:
    """Steps 2 to 4: the log loaded to ``--events``, its first checkpoint, exports, verification."""
    load = run_child("load", owner, arguments.events, env=env)
    size = load["events"]
    say(f"bulk load to {size:,} events (COPY of generated chained events): {load['seconds']:.1f} s")
    checkpoint = run_child("checkpoint", owner, env=env)
    say(f"first checkpoint over {checkpoint['size']:,} events (replays and checks all): "
        f"{checkpoint['seconds']:.1f} s, peak {checkpoint['peak_mib']:.0f} MiB")

    copy = run_child("copy", owner, size, env=env)
    jsonl = run_child("export", owner, size, "jsonl", "", env=env)
    ratio = copy["seconds"] / jsonl["seconds"]
    say(f"COPY (SELECT record ...) TO STDOUT: {copy['seconds']:.2f} s (cpu {copy['cpu']:.2f} s), "
        f"{copy['bytes'] / 2**20:,.0f} MiB, {size / copy['seconds']:,.0f} events/s, peak {copy['peak_mib']:.0f} MiB")
    say(f"export JSON Lines: {jsonl['seconds']:.2f} s (cpu {jsonl['cpu']:.2f} s), {jsonl['bytes'] / 2**20:,.0f} MiB, "
        f"{size / jsonl['seconds']:,.0f} events/s, peak {jsonl['peak_mib']:.0f} MiB; "
        f"throughput ratio export/COPY = {ratio:.2f} (target >= 0.5), memory target < 150 MB")
    csv = run_child("export", owner, size, "csv", "", env=env)
    say(f"export CSV: {csv['seconds']:.2f} s, {size / csv['seconds']:,.0f} events/s, peak {csv['peak_mib']:.0f} MiB")
    bundle_path = str(workdir / "bundle.jsonl")
    bundle = run_child("export", owner, size, "bundle", bundle_path, env=env)
    say(f"export bundle: {bundle['seconds']:.2f} s, {bundle['bytes'] / 2**20:,.0f} MiB, "
        f"peak {bundle['peak_mib']:.0f} MiB")
    verify = run_child("verify", bundle_path, key.verifier.vkey(), env=env)
    say(f"offline verification of the {size:,}-event bundle: {verify['seconds']:.1f} s (cpu {verify['cpu']:.1f} s; "
        f"target < 20 s), exit {verify['status']}, peak {verify['peak_mib']:.0f} MiB")
    if arguments.live_verify:
        live = run_child("live-verify", owner, env=env)
        say(f"live verification (manage.py audit_verify) of {live['events']:,} events: {live['seconds']:.1f} s, "
            f"peak {live['peak_mib']:.0f} MiB")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        figures = CHILDREN[sys.argv[2]](*json.loads(sys.argv[3]))
        say(json.dumps(figures))
    else:
        main()
