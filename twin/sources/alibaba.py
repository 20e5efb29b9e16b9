"""The Alibaba GPU trace v2023 (``openb_pod_list_*.csv``) as a workload (docs/twin.md, "Sources").

* Only GPU tasks (``num_gpu`` > 0); CPU-only tasks are not the twin's.
* ``submit_at`` = ``creation_time``; ``runtime_s`` = ``deletion_time`` − ``scheduled_time`` (or −
  ``creation_time`` for a task never scheduled), at least a minute; ``requested_s`` = the runtime
  rounded up to whole hours (people ask for hours).
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


def _job(source: str, line: int, row: dict[str, str], weights: list[float]) -> Job | None:
    count, milli = _int(source, line, row, "num_gpu"), _int(source, line, row, "gpu_milli")
    if count == 0 or milli == 0:
        return None
    name = row.get("name") or f"line-{line}"
    created, deleted = _int(source, line, row, "creation_time"), _int(source, line, row, "deletion_time")
    scheduled = (row.get("scheduled_time") or "").strip()
    began = _int(source, line, row, "scheduled_time") if scheduled else created
    qos = (row.get("qos") or "").strip()
    if qos not in QOS_CLASSES:
        raise TwinInputError(source, line, "qos", f"must be one of {', '.join(QOS_CLASSES)}, not {qos!r}")
    runtime = float(max(60, deleted - began))
    models = frozenset(m.strip() for m in (row.get("gpu_spec") or "").split("|") if m.strip())
    flavor, shape = flavor_for(count, milli)
    crc = zlib.crc32(name.encode())
    department = DEPARTMENTS[department_of(name, weights)]
    return Job(
        line=line, submit_at=float(created), department=department, project=f"{department}-{crc % 3}",
        shape=Shape(shape.num_gpu, shape.gpu_milli, models), quantity=1, runtime_s=runtime,
        requested_s=3600.0 * math.ceil(runtime / 3600), priority_class=QOS_CLASSES[qos],
        busy=busy_draw(random.Random(crc)), flavor=None if models else flavor,
    )


def trace_read(text: str, *, source: str = "trace") -> list[Job]:
    """The GPU tasks of a pod list, in submission order."""
    reader = csv.DictReader(io.StringIO(text))
    weights = zipf_weights(len(DEPARTMENTS), TRACE_SKEW)
    jobs = [job for row in reader if (job := _job(source, reader.line_num, row, weights)) is not None]
    return sorted(jobs, key=lambda job: (job.submit_at, job.line))


def trace_load(path: Path) -> list[Job]:
    return trace_read(path.read_text(), source=path.name)


def trace_policy(installed: int) -> Policy:
    """Each department guaranteed its share of the trace's tasks (its Zipf weight) of the installed
    GPUs, limited to the whole cluster."""
    return policy_for(DEPARTMENTS, zipf_weights(len(DEPARTMENTS), TRACE_SKEW), installed)
