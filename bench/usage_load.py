"""GET load on one path: client processes on one keep-alive connection each (for bench/accounting.py)."""

from __future__ import annotations

import http.client
import multiprocessing
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Phase:
    elapsed: float
    latencies: list[float]
    errors: int
    size: int  # bytes of the last reply


def _client(port: int, token: str, path: str, duration: float, results: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    latencies: list[float] = []
    errors = size = 0
    deadline = time.perf_counter() + duration
    while time.perf_counter() < deadline:
        began = time.perf_counter()
        connection.request("GET", path, headers={"Authorization": f"Token {token}"})
        response = connection.getresponse()
        body = response.read()
        latencies.append(time.perf_counter() - began)
        errors += response.status != 200
        size = len(body)
    results.put((latencies, errors, size))


def run_clients(port: int, token: str, path: str, clients: int, duration: float) -> Phase:
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    processes = [context.Process(target=_client, args=(port, token, path, duration, results)) for _ in range(clients)]
    began = time.perf_counter()
    for process in processes:
        process.start()
    collected = [results.get(timeout=duration + 120) for _ in processes]
    for process in processes:
        process.join()
    return Phase(
        elapsed=time.perf_counter() - began,
        latencies=[latency for latencies, _, _ in collected for latency in latencies],
        errors=sum(errors for _, errors, _ in collected),
        size=max(size for _, _, size in collected),
    )
