"""The figures of ``bench/scale.py``: throughput and p50/p99 per operation and phase, server CPU per
request, push lag, and one line per target with MET / NOT MET."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench.api_load import percentile
from bench.scale_drive import PhaseResult

APPROVALS_TARGET = 40.0
APPROVAL_P99_TARGET_S = 1.0
LAG_P99_TARGET_S = 5.0
LAG_RATE_TARGET = 20.0
SUBMIT_THROUGHPUT_RATIO = 0.5
SUBMIT_P99_RATIO = 2.0
FEEDBACK_P99_TARGET_S = 0.1
MONTH_P99_RATIO = 2.0


def rate(result: PhaseResult, kind: str) -> float:
    return len(result.total.latencies.get(kind, [])) / result.elapsed if result.elapsed else 0.0


def p99(result: PhaseResult, kind: str) -> float:
    return percentile(result.total.latencies.get(kind, []), 0.99)


def operation_lines(phases: dict[str, PhaseResult]) -> list[str]:
    lines = [f"{'phase':<8} {'operation':<9} {'answered':>8} {'per s':>7} {'p50 ms':>8} {'p99 ms':>8} {'errors':>6}"]
    for phase, result in phases.items():
        total = result.total
        for kind in sorted(set(total.latencies) | set(total.errors)):
            values = total.latencies.get(kind, [])
            statuses = ",".join(str(status) for status in sorted(set(total.statuses.get(kind, []))))
            lines.append(
                f"{phase:<8} {kind:<9} {len(values):>8} {rate(result, kind):>7.1f} {1000 * percentile(values, 0.5):>8.1f}"
                f" {1000 * percentile(values, 0.99):>8.1f} {total.errors.get(kind, 0):>6}" + (f" (status {statuses})" if statuses else "")
            )
    return lines


@dataclass(frozen=True)
class Cpu:
    """Server CPU seconds a phase took: gunicorn workers, PostgreSQL backends, Celery workers."""

    web: float
    database: float
    workers: float


def cpu_lines(phases: dict[str, PhaseResult], cpu: dict[str, Cpu]) -> list[str]:
    lines = []
    for phase, result in phases.items():
        requests = sum(len(values) for values in result.total.latencies.values())
        approvals = len(result.total.latencies.get("approve", []))
        if not requests:
            continue
        used = cpu[phase]
        per_approval = f"; Celery workers {1000 * used.workers / approvals:.1f} ms per approval" if approvals else ""
        lines.append(
            f"{phase:<8} server CPU per request {1000 * (used.web + used.database) / requests:7.2f} ms (gunicorn "
            f"{1000 * used.web / requests:.2f} ms, PostgreSQL {1000 * used.database / requests:.2f} ms){per_approval}"
        )
        if phase == "approve" and approvals and requests == approvals:
            cores = APPROVALS_TARGET * (used.web + used.database + used.workers) / approvals
            lines.append(f"{'':<8} {APPROVALS_TARGET:.0f} approvals/s at this CPU per approval (web, PostgreSQL and their "
                         f"pushes) keep {cores:.1f} cores busy")
    return lines


def lag_line(phase: str, lag: dict[str, Any], approvals_per_s: float) -> str:
    """The lags of a phase's pushes (in the order they were queued: the halves' medians say whether
    the lag grew as the phase went on or came from its start)."""
    lags = lag["lags"]
    half = len(lags) // 2
    return (f"push lag ({phase} phase, approval -> applied, from the push rows): {len(lags)} pushes, "
            f"p50 {percentile(lags, 0.5):.2f} s, p99 {percentile(lags, 0.99):.2f} s, at {approvals_per_s:.1f} approvals/s "
            f"(p50 of the first half queued {percentile(lags[:half], 0.5):.2f} s, of the second {percentile(lags[half:], 0.5):.2f} s); "
            f"not delivered {lag['not_done']}; of them to the test API server: {len(lag['api_server_lags'])}, "
            f"p50 {percentile(lag['api_server_lags'], 0.5):.2f} s, p99 {percentile(lag['api_server_lags'], 0.99):.2f} s")


def target_lines(phases: dict[str, PhaseResult], lag: dict[str, Any]) -> list[str]:
    """One line per target of issue 38, MET or NOT MET, with the figure measured."""
    get_rate, get_p99 = rate(phases["get"], "get"), p99(phases["get"], "get")
    approve_rate, approve_p99 = rate(phases["approve"], "approve"), p99(phases["approve"], "approve")
    submit_ratio = rate(phases["submit"], "submit") / get_rate if get_rate else 0.0
    submit_p99_ratio = p99(phases["submit"], "submit") / get_p99 if get_p99 else float("inf")
    lag_p99, paced_rate = percentile(lag["lags"], 0.99), rate(phases["paced"], "approve")
    feedback_p99 = p99(phases["mix"], "feedback")
    mix_get_p99 = p99(phases["mix"], "get")
    month_ratio = p99(phases["mix"], "month") / mix_get_p99 if mix_get_p99 else float("inf")
    checks = [
        (f"approvals {approve_rate:.1f}/s >= {APPROVALS_TARGET:.0f}/s with p99 {approve_p99:.2f} s <= {APPROVAL_P99_TARGET_S:.0f} s",
         approve_rate >= APPROVALS_TARGET and approve_p99 <= APPROVAL_P99_TARGET_S),
        (f"push lag p99 {lag_p99:.2f} s <= {LAG_P99_TARGET_S:.0f} s at {LAG_RATE_TARGET:.0f} approvals/s sustained "
         f"(paced phase: reached {paced_rate:.1f}/s, {lag['not_done']} not delivered)",
         lag_p99 <= LAG_P99_TARGET_S and paced_rate >= 0.95 * LAG_RATE_TARGET and not lag["not_done"]),
        (f"submit throughput {submit_ratio:.2f} of the GET's >= {SUBMIT_THROUGHPUT_RATIO} with p99 {submit_p99_ratio:.2f}x "
         f"the GET's <= {SUBMIT_P99_RATIO:.0f}x", submit_ratio >= SUBMIT_THROUGHPUT_RATIO and submit_p99_ratio <= SUBMIT_P99_RATIO),
        (f"request-form feedback p99 {1000 * feedback_p99:.0f} ms <= {1000 * FEEDBACK_P99_TARGET_S:.0f} ms (mix)",
         feedback_p99 <= FEEDBACK_P99_TARGET_S),
        (f"one department's month by day p99 {month_ratio:.2f}x the GET's p99 <= {MONTH_P99_RATIO:.0f}x under load (mix)",
         month_ratio <= MONTH_P99_RATIO),
    ]
    return [f"target: {text}: {'MET' if met else 'NOT MET'}" for text, met in checks]
