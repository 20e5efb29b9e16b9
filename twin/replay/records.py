"""What a replay keeps of each request, run and reclaim, and what it returns (``engine``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from twin.replay.modes import Start
from twin.workload import Job


@dataclass
class JobRecord:
    job: Job
    department: int
    in_guarantee: bool = False
    first_start: float | None = None
    finish: float | None = None
    restarts: int = 0


@dataclass(frozen=True)
class Run:
    """A unit-set of a grant held from ``start`` to ``end``: ``held`` GPU-equivalents booked,
    ``native`` those its request asks; ``lost``: ended by a reclaim."""

    record: int
    department: int
    start: float
    end: float
    held: float
    native: float
    busy: float
    lost: bool = False


@dataclass
class Outcome:
    policy: str
    records: list[JobRecord]
    runs: list[Run]
    horizon: float
    stop: float
    installed: int
    reclaims: int = 0
    events: int = 0
    wall_s: float = 0.0
    departments: tuple[str, ...] = ()
    guarantees: tuple[float, ...] = ()
    notice_s: float = 0.0
    idle_warnings: int = 0  # grants an idle policy warned
    idle_reclaims: int = 0  # grants an idle policy reclaimed (ended after their notice)
    window_edges: int = 0  # changes of a department's effective quota replayed
    shrink_reclaims: int = 0  # grants a window's lower limit took back (shrink policy ``reclaim``)


@dataclass(order=True)
class Entry:
    key: tuple[float, ...]
    record: int = field(compare=False)
    job: Job = field(compare=False)


@dataclass
class Promise:
    entry: Entry | None  # None: a window's shrink took the victims back, for nobody
    left: int  # victims still running out their notice
    start: Start | None  # its units, booked where the victims' units were
    decided: float = 0.0  # when the reclaim was decided


_UNITS = 1 << 20
_GRANTS = 1 << 40


def pack(promise: int, gid: int, units: int) -> int:
    return (promise * _GRANTS + gid) * _UNITS + units


def unpack(packed: int) -> tuple[int, int, int]:
    rest, units = divmod(packed, _UNITS)
    promise, gid = divmod(rest, _GRANTS)
    return promise, gid, units


def bucket_key(job: Job, *, period: bool = False, flavor: bool = False, ahead: bool = False) -> tuple[object, ...]:
    """The FIFO bucket of identical requests a request waits in (``Replay._bucket_of``):
    ``period``, ``flavor``, ``ahead``: requests that ask different periods, two flavors of one
    shape, or (booked ahead) different starts are not identical."""
    key: tuple[object, ...] = (job.department, job.priority_class, job.shape, job.quantity)
    if period:
        key += (job.requested_s,)
    if flavor:
        key += (job.flavor,)
    return key + (job.starts_at,) if ahead else key
