"""The Alibaba GPU trace v2023 (``openb_pod_list_*.csv``) as a workload (docs/twin.md, "Sources").

* Only GPU tasks (``num_gpu`` > 0); CPU-only tasks are not the twin's.
* A window of ``window_days`` (30) ending at the last creation: 90 % of the default list's GPU
  tasks were created after day 119 of its 149, so its first months hold almost nothing. A task
  created before the window that still runs in it arrives at 0 for what is left of its run; one
  that ended before is left out. Even so the trace's own times ask little of its cluster: the
  median task runs about 8 minutes, and the last 30 days ask about 0.6 % of the installed GPU-hours
  (its "98 % of the cluster" is every request at once, as the FGD protocol, which ignores time,
  places them).
* ``submit_at`` = ``creation_time`` − the window's start; ``runtime_s`` = ``deletion_time`` −
  ``scheduled_time`` (or − ``creation_time`` for a task never scheduled; or − the window's start),
  at least a minute; ``requested_s`` = the runtime rounded up to whole hours (people ask for hours).
* ``qos`` → priority class: Guaranteed → gpu-production, LS and Burstable → gpu-standard, BE →
  gpu-preemptible.
* ``gpu_milli`` → a sharing flavor (``share-<n>00``: the share rounded up to the next tenth of a
  GPU), whole GPUs → ``gpu-<n>``; a task with ``gpu_spec`` keeps its shape and models instead.
* Department: ``catalogue.department_of(name)`` over the Zipf weights (skew 1) of the eight
  ``catalogue.DEPARTMENTS``; project: ``<department>-<crc32(name) mod 3>``.
* ``busy``: the generator's busy draw, seeded by the task's CRC-32.
"""

from __future__ import annotations

import csv
import io
import math
import random
import zlib
from pathlib import Path

from twin.errors import TwinInputError
from twin.policy import Policy
from twin.sources.catalogue import DEPARTMENTS, department_of, flavor_for, policy_for, zipf_weights
from twin.sources.generator import busy_draw
from twin.workload import Job, Shape

QOS_CLASSES = {"Guaranteed": "gpu-production", "LS": "gpu-standard", "Burstable": "gpu-standard",
               "BE": "gpu-preemptible"}
TRACE_SKEW = 1.0


def _int(source: str, line: int, row: dict[str, str], field: str) -> int:
    value = (row.get(field) or "").strip()
    try:
        return int(value)
    except ValueError:
        raise TwinInputError(source, line, field, f"must be a whole number, not {value!r}") from None


def _job(source: str, line: int, row: dict[str, str], weights: list[float], origin: int) -> Job | None:
    count, milli = _int(source, line, row, "num_gpu"), _int(source, line, row, "gpu_milli")
    if count == 0 or milli == 0:
        return None
    name = row.get("name") or f"line-{line}"
    created, deleted = _int(source, line, row, "creation_time"), _int(source, line, row, "deletion_time")
    scheduled = (row.get("scheduled_time") or "").strip()
    began = max(origin, _int(source, line, row, "scheduled_time") if scheduled else created)
    if deleted <= origin:
        return None  # ended before the window
    qos = (row.get("qos") or "").strip()
    if qos not in QOS_CLASSES:
        raise TwinInputError(source, line, "qos", f"must be one of {', '.join(QOS_CLASSES)}, not {qos!r}")
    runtime = float(max(60, deleted - began))
    models = frozenset(m.strip() for m in (row.get("gpu_spec") or "").split("|") if m.strip())
    flavor, shape = flavor_for(count, milli)
    crc = zlib.crc32(name.encode())
    department = DEPARTMENTS[department_of(name, weights)]
    return Job(
        line=line, submit_at=float(max(created, origin) - origin), department=department, project=f"{department}-{crc % 3}",
        shape=Shape(shape.num_gpu, shape.gpu_milli, models), quantity=1, runtime_s=runtime,
        requested_s=3600.0 * math.ceil(runtime / 3600), priority_class=QOS_CLASSES[qos],
        busy=busy_draw(random.Random(crc)), flavor=None if models else flavor,
    )


def trace_read(text: str, *, source: str = "trace", window_days: float | None = 30.0) -> list[Job]:
    """The GPU tasks of a pod list that run in its last ``window_days`` (None: all of it), in
    submission order."""
    reader = csv.DictReader(io.StringIO(text))
    rows = [(reader.line_num, row) for row in reader]
    last = max((_int(source, line, row, "creation_time") for line, row in rows), default=0)
    origin = 0 if window_days is None else max(0, last - round(window_days * 86400))
    weights = zipf_weights(len(DEPARTMENTS), TRACE_SKEW)
    jobs = [job for line, row in rows if (job := _job(source, line, row, weights, origin)) is not None]
    return sorted(jobs, key=lambda job: (job.submit_at, job.line))


def trace_load(path: Path, *, window_days: float | None = 30.0) -> list[Job]:
    return trace_read(path.read_text(), source=path.name, window_days=window_days)


def trace_policy(installed: int) -> Policy:
    """Each department guaranteed its share of the trace's tasks (its Zipf weight) of the installed
    GPUs, limited to the whole cluster."""
    return policy_for(DEPARTMENTS, zipf_weights(len(DEPARTMENTS), TRACE_SKEW), installed)
