"""The workload format: one request per line, JSON Lines or CSV (docs/twin.md, "Workloads").

Fields: ``submit_at`` (seconds from the start, or ISO 8601 with a time zone), ``department``,
``project``, either ``flavor`` (a name of the policy's catalogue) or a shape (``num_gpu``,
``gpu_milli``, ``gpu_model``, or ``mig_profile`` with ``gpu_model`` for a MIG instance), ``quantity``, ``runtime_s`` (how long the work really runs),
``requested_s`` (the period asked for, at least ``runtime_s``), ``priority_class``, ``busy`` (the
fraction of the grant its GPUs are busy) and, optionally, ``starts_at`` (a later start asked for).
Every bad value is a :class:`~twin.errors.TwinInputError` naming the line and the field.
"""

from __future__ import annotations

import csv
import datetime
import io
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from decimal import Decimal
from pathlib import Path
from typing import Any, NoReturn

from twin.errors import TwinInputError
from twin.mig import MigAskError, profile_weight

FIELDS = ("submit_at", "department", "project", "flavor", "num_gpu", "gpu_milli", "gpu_model", "mig_profile",
          "quantity", "runtime_s", "requested_s", "priority_class", "busy", "starts_at")
REQUIRED = ("submit_at", "department", "project", "quantity", "runtime_s", "requested_s", "priority_class", "busy")
GPU_MILLI = 1000


@dataclass(frozen=True)
class Shape:
    """One unit of a request: ``num_gpu`` GPUs, ``gpu_milli`` thousandths of each (below 1000 only
    for one GPU), of one of ``models`` (empty: any model). A MIG instance (``mig_profile``) is one
    GPU's instance of that profile weighing ``mig_weight`` GPU-equivalents (``twin.mig``); its
    ``gpu_milli`` is that weight in whole thousandths, for the metrics' sums only."""

    num_gpu: int
    gpu_milli: int = GPU_MILLI
    models: frozenset[str] = frozenset()
    mig_profile: str | None = None
    mig_weight: Decimal = Decimal(0)

    @property
    def milli(self) -> int:
        """The unit's GPU demand in thousandths of a GPU (its GPU-equivalents × 1000)."""
        return self.num_gpu * self.gpu_milli

    @property
    def equivalents(self) -> Decimal:
        """What one unit weighs in GPU-equivalents, exactly (a MIG instance: its profile's weight)."""
        return self.mig_weight if self.mig_profile is not None else Decimal(self.milli) / GPU_MILLI


def mig_shape(profile: str, models: frozenset[str]) -> Shape:
    """The shape of one MIG instance of ``profile`` on one of ``models``; ``MigAskError`` where
    no such instance exists (``twin.mig.profile_weight``)."""
    weight = profile_weight(profile, models)
    return Shape(1, int((weight * GPU_MILLI).to_integral_value()), models, profile, weight)


@dataclass(frozen=True)
class Job:
    """One request of the workload, with its line number (1-based, the header counted in CSV)."""

    line: int
    submit_at: float
    department: str
    project: str
    shape: Shape
    quantity: int
    runtime_s: float
    requested_s: float
    priority_class: str
    busy: float
    flavor: str | None = None
    starts_at: float | None = None

    @property
    def eligible_at(self) -> float:
        """When it may start: its ``starts_at`` if it asked for one, else its submission."""
        return self.submit_at if self.starts_at is None else self.starts_at

    @property
    def milli(self) -> int:
        """The whole request's GPU demand in thousandths of a GPU."""
        return self.shape.milli * self.quantity


class _Line:
    """One line's raw values, read with errors that name the line and the field."""

    def __init__(self, source: str, line: int, values: Mapping[str, Any]) -> None:
        self.source, self.line = source, line
        self.values = {key: value for key, value in values.items() if value is not None and value != ""}
        self.iso: set[str] = set()  # the moment fields given in ISO 8601 (seconds since the epoch until made relative)
        unknown = sorted(set(self.values) - set(FIELDS))
        if unknown:
            self.fail(unknown[0], f"unknown field (known: {', '.join(FIELDS)})")

    def fail(self, field: str, message: str) -> NoReturn:
        raise TwinInputError(self.source, self.line, field, message)

    def has(self, field: str) -> bool:
        return field in self.values

    def text(self, field: str) -> str:
        value = self.values.get(field)
        if not isinstance(value, str) or not value.strip():
            self.fail(field, "required, a non-empty text")
        return str(value).strip()

    def number(self, field: str, *, low: float = 0.0, high: float | None = None) -> float:
        value = self.values.get(field)
        if value is None:
            self.fail(field, "required")
        try:
            number = float(value) if not isinstance(value, bool) else float("nan")
        except (TypeError, ValueError):
            number = float("nan")
        if number != number or number < low or (high is not None and number > high):
            bound = f"from {low:g} to {high:g}" if high is not None else f"at least {low:g}"
            self.fail(field, f"must be a number {bound}, not {value!r}")
        return number

    def integer(self, field: str, *, low: int, high: int) -> int:
        number = self.number(field, low=low, high=high)
        if number != int(number):
            self.fail(field, f"must be a whole number, not {self.values[field]!r}")
        return int(number)

    def moment(self, field: str) -> float:
        """Seconds from the start, or an ISO 8601 moment as seconds since the Unix epoch (made
        relative to the workload's first moment once every line is read: ``_relative``)."""
        value = self.values.get(field)
        if isinstance(value, str) and not _is_number(value):
            try:
                parsed = datetime.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
            except ValueError:
                self.fail(field, f"must be seconds from the start or an ISO 8601 moment, not {value!r}")
            if parsed.tzinfo is None:
                self.fail(field, f"an ISO 8601 moment needs a time zone (e.g. Z), not {value!r}")
            self.iso.add(field)
            return parsed.timestamp()
        return self.number(field)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def job_parse(raw: _Line, flavors: Mapping[str, Shape] | None = None) -> Job:
    """One line as a request (ISO moments still since the epoch: ``raw.iso`` names them)."""
    for field in REQUIRED:
        if not raw.has(field):
            raw.fail(field, "required")
    shape = _shape(raw, flavors)
    runtime = raw.number("runtime_s", low=1e-9)
    requested = raw.number("requested_s", low=1e-9)
    if requested < runtime:
        raw.fail("requested_s", f"must be at least runtime_s ({runtime:g}), not {requested:g}")
    return Job(
        line=raw.line, submit_at=raw.moment("submit_at"), department=raw.text("department"),
        project=raw.text("project"), shape=shape, quantity=raw.integer("quantity", low=1, high=10_000),
        runtime_s=runtime, requested_s=requested, priority_class=raw.text("priority_class"),
        busy=raw.number("busy", low=0.0, high=1.0), flavor=raw.text("flavor") if raw.has("flavor") else None,
        starts_at=raw.moment("starts_at") if raw.has("starts_at") else None,
    )


def _shape(raw: _Line, flavors: Mapping[str, Shape] | None) -> Shape:
    if raw.has("flavor"):
        for field in ("num_gpu", "gpu_milli", "gpu_model", "mig_profile"):
            if raw.has(field):
                raw.fail(field, "give either a flavor or a shape (num_gpu, gpu_milli, gpu_model, mig_profile), not both")
        name = raw.text("flavor")
        if flavors is None:
            return Shape(1)  # resolved against the policy's catalogue later (``jobs_resolve``)
        if name not in flavors:
            raw.fail("flavor", f"no flavor {name!r} in the catalogue (known: {', '.join(sorted(flavors)) or 'none'})")
        return flavors[name]
    if raw.has("mig_profile"):
        return _mig_shape(raw)
    if not raw.has("num_gpu"):
        raw.fail("num_gpu", "required when no flavor is given")
    count = raw.integer("num_gpu", low=1, high=64)
    milli = raw.integer("gpu_milli", low=1, high=GPU_MILLI) if raw.has("gpu_milli") else GPU_MILLI
    if count > 1 and milli != GPU_MILLI:
        raw.fail("gpu_milli", "a share below a whole GPU (1000) is only possible with num_gpu 1")
    return Shape(count, milli, _models(raw))


def _mig_shape(raw: _Line) -> Shape:
    """A MIG instance: one GPU's instance of the profile, on the models named (or any)."""
    for field in ("num_gpu", "gpu_milli"):
        if raw.has(field):
            raw.fail(field, "a MIG instance (mig_profile) is one instance on one GPU: no num_gpu or gpu_milli")
    models = _models(raw)
    try:
        return mig_shape(raw.text("mig_profile"), models)
    except MigAskError as problem:
        raw.fail(problem.field, str(problem))


def _models(raw: _Line) -> frozenset[str]:
    if not raw.has("gpu_model"):
        return frozenset()
    return frozenset(m.strip() for m in raw.text("gpu_model").split("|") if m.strip())


def _relative(parsed: list[tuple[Job, set[str]]], source: str) -> list[Job]:
    """ISO moments made seconds from the first of them; a workload mixing both is refused."""
    iso = [job for job, fields in parsed if "submit_at" in fields]
    if iso and len(iso) != len(parsed):  # name the first line written unlike the first one
        first = "submit_at" in parsed[0][1]
        line = next(job.line for job, fields in parsed if ("submit_at" in fields) != first)
        raise TwinInputError(source, line, "submit_at", "seconds and ISO 8601 moments are mixed in one workload")
    origin = min((job.submit_at for job in iso), default=0.0)
    out = []
    for job, fields in parsed:
        if (job.starts_at is not None) and (("starts_at" in fields) != bool(iso)):
            raise TwinInputError(source, job.line, "starts_at", "must be written as submit_at is (seconds or ISO 8601)")
        job = replace(job, submit_at=job.submit_at - origin,
                      starts_at=None if job.starts_at is None else job.starts_at - origin)
        if job.starts_at is not None and job.starts_at < job.submit_at:
            raise TwinInputError(source, job.line, "starts_at", "must not be before submit_at")
        out.append(job)
    return out


def _records(text: str, source: str, fmt: str) -> Iterator[tuple[int, Mapping[str, Any]]]:
    if fmt == "csv":
        reader = csv.DictReader(io.StringIO(text))
        for row in reader:
            extra = row.pop(None, None)  # type: ignore[call-overload, unused-ignore]
            if extra:
                raise TwinInputError(source, reader.line_num, "(columns)", "more values than the header names")
            yield reader.line_num, row
        return
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise TwinInputError(source, number, "(line)", f"not JSON: {error.msg}") from None
        if not isinstance(record, dict):
            raise TwinInputError(source, number, "(line)", "must be a JSON object")
        yield number, record


def jobs_read(text: str, *, source: str = "workload", fmt: str = "jsonl",
              flavors: Mapping[str, Shape] | None = None) -> list[Job]:
    """Every request of a workload's text (``fmt``: ``jsonl`` or ``csv``), in submission order."""
    if fmt not in ("jsonl", "csv"):
        raise TwinInputError(source, 0, "(format)", f"must be jsonl or csv, not {fmt!r}")
    parsed = []
    for number, record in _records(text, source, fmt):
        raw = _Line(source, number, record)
        parsed.append((job_parse(raw, flavors), raw.iso))
    return sorted(_relative(parsed, source), key=lambda job: (job.submit_at, job.line))


def workload_load(path: Path, *, flavors: Mapping[str, Shape] | None = None) -> list[Job]:
    """A workload file: CSV if its name ends in ``.csv``, else JSON Lines."""
    fmt = "csv" if path.suffix.lower() == ".csv" else "jsonl"
    return jobs_read(path.read_text(), source=path.name, fmt=fmt, flavors=flavors)


def job_record(job: Job) -> dict[str, Any]:
    """The request as one line's fields (the flavor's name where it has one, else its shape)."""
    record: dict[str, Any] = {"submit_at": round(job.submit_at, 3), "department": job.department,
                              "project": job.project}
    if job.flavor is not None:
        record["flavor"] = job.flavor
    elif job.shape.mig_profile is not None:
        record["mig_profile"] = job.shape.mig_profile
        if job.shape.models:
            record["gpu_model"] = "|".join(sorted(job.shape.models))
    else:
        record.update(num_gpu=job.shape.num_gpu, gpu_milli=job.shape.gpu_milli)
        if job.shape.models:
            record["gpu_model"] = "|".join(sorted(job.shape.models))
    record.update(quantity=job.quantity, runtime_s=round(job.runtime_s, 3), requested_s=round(job.requested_s, 3),
                  priority_class=job.priority_class, busy=round(job.busy, 4))
    if job.starts_at is not None:
        record["starts_at"] = round(job.starts_at, 3)
    return record


def jobs_write(jobs: Iterable[Job], *, fmt: str = "jsonl") -> str:
    """The workload as text that :func:`jobs_read` reads back."""
    records = [job_record(job) for job in jobs]
    if fmt == "jsonl":
        return "".join(json.dumps(record, sort_keys=False) + "\n" for record in records)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(FIELDS), lineterminator="\n")
    writer.writeheader()
    writer.writerows(records)
    return out.getvalue()
