"""The clients of ``bench/scale.py``: each one a department's admin and researcher over HTTP, on one
keep-alive connection, doing a weighted mix of operations for a while or a number of times.

Operations: ``get`` (the trivial ``GET /api/v1/me/``), ``submit`` (a request of one unit of a
flavor drawn from the catalogue), ``approve`` (one of its own pending requests, by the department's
admin), ``release`` (one of its own grants), ``month`` (the department's last month by day, as its
page asks), ``feedback`` (the request form's live feedback, as the researcher's browser asks). An
approval with nothing pending submits instead, a release with nothing granted reads ``get``.
"""

from __future__ import annotations

import http.client
import json
import multiprocessing
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

CLIENT_TIMEOUT = 60.0
SUBMITTED = ("a100-80gb", "h100-80gb", "a100-mig-1g-10gb", "a100-mig-3g-40gb", "h100-mps-4", "h100-timeslice-2",
             "h100-vgpu-10gb")
"""Flavors drawn for submits: every sharing mode of the catalogue (MIG, MPS, time-slicing, HAMi)."""


@dataclass(frozen=True)
class Plan:
    """What a client does: operations drawn by weight, until ``seconds`` pass or ``count`` are done;
    with ``rate``, at most that many operations a second (paced from the start, no catching up in
    bursts beyond the schedule), else each as soon as the last is answered."""

    weights: dict[str, float]
    seconds: float = 0.0
    count: int = 0
    seed: int = 7
    rate: float = 0.0


@dataclass
class Tally:
    """One client's figures: latencies and errors per operation, its pending requests and grants."""

    latencies: dict[str, list[float]] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    statuses: dict[str, list[int]] = field(default_factory=dict)  # a few error statuses, to name them
    pending: list[int] = field(default_factory=list)
    granted: list[int] = field(default_factory=list)

    def note(self, kind: str, status: int, expected: int, elapsed: float) -> bool:
        if status == expected:
            self.latencies.setdefault(kind, []).append(elapsed)
            return True
        self.errors[kind] = self.errors.get(kind, 0) + 1
        if len(self.statuses.setdefault(kind, [])) < 5:
            self.statuses[kind].append(status)
        return False

    def merge(self, other: Tally) -> None:
        for kind, values in other.latencies.items():
            self.latencies.setdefault(kind, []).extend(values)
        for kind, count in other.errors.items():
            self.errors[kind] = self.errors.get(kind, 0) + count
        for kind, statuses in other.statuses.items():
            self.statuses.setdefault(kind, []).extend(statuses)
        self.pending.extend(other.pending)
        self.granted.extend(other.granted)


class Line:
    """One keep-alive connection to the portal; a dropped one is opened again (status 0: no answer)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=CLIENT_TIMEOUT)

    def call(self, method: str, path: str, headers: dict[str, str], body: dict[str, Any] | None = None) -> tuple[int, Any, float]:
        began = time.perf_counter()
        try:
            self.connection.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
            response = self.connection.getresponse()
            payload = response.read()
        except (OSError, http.client.HTTPException):
            self.connection.close()
            self.connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=CLIENT_TIMEOUT)
            return 0, None, time.perf_counter() - began
        elapsed = time.perf_counter() - began
        is_json = response.getheader("Content-Type", "").startswith("application/json")
        return response.status, json.loads(payload) if is_json and payload else None, elapsed


class Client:
    """One persona's operations (``setup``: the seed's answer; ``persona``: one of its clients)."""

    def __init__(self, line: Line, setup: dict[str, Any], persona: dict[str, Any], tally: Tally) -> None:
        self.line, self.persona, self.tally = line, persona, tally
        hami = [cluster["id"] for cluster in setup["clusters"] if cluster["hami"]]
        # (flavor, the clusters that offer it): the vGPU flavor only where HAMi runs
        self.choices = [(setup["flavors"][name], hami if "vgpu" in name else [c["id"] for c in setup["clusters"]])
                        for name in SUBMITTED if name in setup["flavors"] and (hami or "vgpu" not in name)]
        self.flavors = [flavor for flavor, _ in self.choices]
        self.priority_class = setup["priority_class"]
        self.month = setup["month"]
        self.rng = random.Random(persona["department"])

    def api(self, token: str) -> dict[str, str]:
        return {"Authorization": f"Token {token}", "Content-Type": "application/json"}

    def get(self) -> None:
        status, _, elapsed = self.line.call("GET", "/api/v1/me/", self.api(self.persona["researcher_token"]))
        self.tally.note("get", status, 200, elapsed)

    def submit(self) -> None:
        now = time.time()
        flavor, clusters = self.rng.choice(self.choices)
        body = {"project": self.persona["project"], "flavor": flavor, "quantity": 1, "cluster": self.rng.choice(clusters),
                "priority_class": self.priority_class, "ends_at": _iso(now + 86400), "justification": "scale bench"}
        status, answer, elapsed = self.line.call("POST", "/api/v1/allocations/", self.api(self.persona["researcher_token"]), body)
        if self.tally.note("submit", status, 201, elapsed):
            self.tally.pending.append(int(answer["id"]))

    def approve(self) -> None:
        if not self.tally.pending:
            self.submit()
            return
        allocation = self.tally.pending.pop(0)
        status, _, elapsed = self.line.call("POST", f"/api/v1/allocations/{allocation}/approve/",
                                               self.api(self.persona["admin_token"]), {"comment": "scale bench"})
        if self.tally.note("approve", status, 200, elapsed):
            self.tally.granted.append(allocation)

    def release(self) -> None:
        if not self.tally.granted:
            self.get()
            return
        allocation = self.tally.granted.pop(self.rng.randrange(len(self.tally.granted)))
        status, _, elapsed = self.line.call("POST", f"/api/v1/allocations/{allocation}/release/",
                                               self.api(self.persona["admin_token"]), {})
        self.tally.note("release", status, 200, elapsed)

    def month_by_day(self) -> None:
        query = urlencode({"granularity": "day", "department": self.persona["department"], **self.month})
        status, _, elapsed = self.line.call("GET", f"/api/v1/usage/?{query}", self.api(self.persona["admin_token"]))
        self.tally.note("month", status, 200, elapsed)

    def feedback(self) -> None:
        query = urlencode({"project": self.persona["project"], "flavor": self.rng.choice(self.flavors),
                           "quantity": self.rng.choice((1, 1, 2, 4)), "priority_class": self.priority_class,
                           "duration_days": 7})
        headers = {"Cookie": f"sessionid={self.persona['sign_in']}", "HX-Request": "true"}
        status, _, elapsed = self.line.call("GET", f"/allocations/new/feedback/?{query}", headers)
        self.tally.note("feedback", status, 200, elapsed)

    def grant(self) -> None:
        """A request submitted and approved at once (the paced phase's step: one approval each)."""
        self.submit()
        if self.tally.pending:
            self.approve()

    def operations(self) -> dict[str, Callable[[], None]]:
        return {"get": self.get, "submit": self.submit, "approve": self.approve, "release": self.release,
                "month": self.month_by_day, "feedback": self.feedback, "grant": self.grant}


def _iso(moment: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(moment))


def client_run(port: int, setup: dict[str, Any], persona: dict[str, Any], plan: Plan, carried: Tally | None = None) -> Tally:
    """Run one client in this process: ``carried`` brings its pending requests and grants from an
    earlier phase. Returns its tally (the pending and granted left, for the next phase)."""
    tally = Tally(pending=list(carried.pending) if carried else [], granted=list(carried.granted) if carried else [])
    client = Client(Line(port), setup, persona, tally)
    operations = client.operations()
    names = list(plan.weights)
    weights = [plan.weights[name] for name in names]
    rng = random.Random(plan.seed * 7919 + persona["department"])
    began = time.perf_counter()
    deadline = began + plan.seconds
    done = 0
    while (plan.count and done < plan.count) or (not plan.count and time.perf_counter() < deadline):
        if plan.rate:
            time.sleep(max(0.0, began + done / plan.rate - time.perf_counter()))
        operations[rng.choices(names, weights)[0]]()
        done += 1
    client.line.connection.close()
    return tally


@dataclass
class PhaseResult:
    elapsed: float
    tallies: list[Tally]

    @property
    def total(self) -> Tally:
        merged = Tally()
        for tally in self.tallies:
            merged.merge(tally)
        return merged


def _forked(port: int, setup: dict[str, Any], work: tuple[dict[str, Any], Plan, Tally | None],
            results: Any, index: int) -> None:
    persona, plan, carried = work
    results.put((index, client_run(port, setup, persona, plan, carried)))


def phase_run(port: int, setup: dict[str, Any], plan: Plan, carried: list[Tally] | None = None) -> PhaseResult:
    """All of the seed's personas as client processes, each with ``plan`` (and what it carried)."""
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    personas = setup["clients"]
    processes = [
        context.Process(target=_forked, args=(port, setup, (persona, plan, carried[index] if carried else None), results, index))
        for index, persona in enumerate(personas)
    ]
    began = time.perf_counter()
    for process in processes:
        process.start()
    collected = dict(results.get(timeout=plan.seconds + 300) for _ in processes)
    for process in processes:
        process.join()
    return PhaseResult(elapsed=time.perf_counter() - began, tallies=[collected[index] for index in range(len(personas))])
