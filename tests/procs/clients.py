"""The clients of ``tests/procs/test_many_processes.py``: a few threads, each a team (a member who
submits, extends and releases, the department admin who approves), driving a seeded random sequence
over HTTP, each request to the next web process in turn.

What a thread does next depends only on its own seed and on what its own requests answered, so a
seed replays the same intentions (how the processes interleave them is the run's). Every answer is
counted by operation and status; a 5xx is kept with its body, and so is a request that got no
answer at all (status 0).
"""

from __future__ import annotations

import datetime
import json
import random
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

ROUND = ("submit", "submit", "approve", "approve", "extend", "release")
"""What a thread means to do in each round of six steps, in an order its seed shuffles."""
HOLDING = frozenset({"scheduled", "approved", "provisioning", "active", "failed", "reclaiming"})


@dataclass(frozen=True)
class Team:
    name: str
    member_token: str
    admin_token: str
    project_id: int
    flavor_ids: tuple[int, ...]
    standard_id: int
    preemptible_id: int
    opens_with_reclaim: bool = False
    """Its first steps make the rules reclaim: a preemptible grant fills its quota, then, once a
    worker has made it active, a standard request of the same team is approved over it (whatever
    the seed). Approved while a worker still provisions it, the grant is locked by the worker's
    transaction, so the approval plans without it (``_decide_and_lock_victims``) and is refused:
    the reclaim would depend on how fast the worker is."""


@dataclass
class Tally:
    """What every client saw, shared between the threads."""

    answers: Counter[str] = field(default_factory=Counter)  # "operation status" → how many
    server_errors: list[str] = field(default_factory=list)
    approved: dict[int, str] = field(default_factory=dict)  # allocation → its state as approval answered
    steps: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, operation: str, status: int, body: Any) -> None:
        with self.lock:
            self.answers[f"{operation} {status}"] += 1
            if status >= 500 or status == 0:
                self.server_errors.append(f"{operation} {status}: {str(body)[:300]}")


class Client:
    """One team's thread: ``steps`` operations, request ``n`` to ``servers[(offset + n) % len]``."""

    def __init__(self, team: Team, *, servers: list[str], seed: int, tally: Tally, offset: int) -> None:
        self.team, self.servers, self.tally = team, servers, tally
        self.rng = random.Random(seed)
        self.sent = offset
        self.pending: list[int] = []
        self.holding: dict[int, datetime.datetime] = {}  # allocation → its end
        self.plan: list[str] = []

    def call(self, operation: str, method: str, path: str, token: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        base = self.servers[self.sent % len(self.servers)]
        self.sent += 1
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{base}{path}", data=data, method=method, headers={  # noqa: S310 - loopback
            "Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=120) as answer:  # noqa: S310 - loopback
                status, text = answer.status, answer.read()
        except urllib.error.HTTPError as error:
            status, text = error.code, error.read()
        except OSError as error:  # no answer at all: counted with the server errors (status 0)
            status, text = 0, repr(error).encode()
        try:
            parsed = json.loads(text) if text else None
        except ValueError:
            parsed = text[:300]
        self.tally.count(operation, status, parsed)
        return status, parsed

    def run(self, steps: int, *, after_step: Callable[[], None]) -> None:
        if self.team.opens_with_reclaim:
            self.plan = ["approve", "submit standard 2", "settle", "approve", "submit preemptible 4"]  # popped from the end
        for _ in range(steps):
            if not self.plan:
                self.plan = list(ROUND)
                self.rng.shuffle(self.plan)
            self.step(self.plan.pop())
            after_step()

    def step(self, intent: str) -> None:
        """``intent`` when it can be done, else a submit."""
        if intent == "settle":
            self.settle()
        elif intent == "approve" and self.pending:
            self.approve(self.pending.pop(self.rng.randrange(len(self.pending))))
        elif intent == "release" and self.holding:
            self.release(self.rng.choice(sorted(self.holding)))
        elif intent == "extend" and self.holding:
            self.extend(self.rng.choice(sorted(self.holding)))
        elif intent.startswith("submit "):
            _, priority, quantity = intent.split()
            self.submit(quantity=int(quantity), preemptible=priority == "preemptible", first=True)
        else:
            self.submit()

    def submit(self, *, quantity: int | None = None, preemptible: bool | None = None, first: bool = False) -> None:
        team, rng = self.team, self.rng
        later = rng.random() < 0.15 and not first
        start = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=2 if later else 0)
        preemptible = rng.random() < 0.35 if preemptible is None else preemptible
        body = {
            "project": team.project_id, "flavor": team.flavor_ids[0] if first else rng.choice(team.flavor_ids),
            "quantity": quantity or rng.randint(1, 3),
            "priority_class": team.preemptible_id if preemptible else team.standard_id,
            "starts_at": start.isoformat(), "ends_at": (start + datetime.timedelta(days=3)).isoformat(),
            "justification": f"many processes, {team.name}",
        }  # fmt: skip
        status, answer = self.call("submit", "POST", "/api/v1/allocations/", team.member_token, body)
        if status == 201:
            self.pending.append(int(answer["id"]))

    def approve(self, allocation_id: int) -> None:
        status, answer = self.call("approve", "POST", f"/api/v1/allocations/{allocation_id}/approve/",
                                   self.team.admin_token, {})
        if status == 200 and answer["state"] in HOLDING:
            with self.tally.lock:
                self.tally.approved[allocation_id] = str(answer["state"])
            self.holding[allocation_id] = datetime.datetime.fromisoformat(answer["ends_at"])

    def settle(self, *, seconds: float = 120.0) -> None:
        """Wait until every grant this thread holds is active (its worker's push has committed)."""
        deadline = time.monotonic() + seconds
        waiting = sorted(self.holding)
        while waiting and time.monotonic() < deadline:
            status, answer = self.call("settle", "GET", f"/api/v1/allocations/{waiting[0]}/", self.team.member_token)
            if status == 200 and answer["state"] in ("approved", "provisioning", "scheduled"):
                time.sleep(0.2)
            else:
                waiting.pop(0)

    def release(self, allocation_id: int) -> None:
        status, _ = self.call("release", "POST", f"/api/v1/allocations/{allocation_id}/release/", self.team.member_token, {})
        if status in (200, 409):  # 409: reclaimed or released under it meanwhile
            self.holding.pop(allocation_id, None)

    def extend(self, allocation_id: int) -> None:
        ends_at = self.holding[allocation_id] + datetime.timedelta(hours=self.rng.choice((6, 12, 24)))
        status, answer = self.call("extend", "POST", f"/api/v1/allocations/{allocation_id}/renew/",
                                   self.team.member_token, {"ends_at": ends_at.isoformat()})
        if status == 200:
            self.holding[allocation_id] = datetime.datetime.fromisoformat(answer["ends_at"])
        elif status == 409:
            self.holding.pop(allocation_id, None)
