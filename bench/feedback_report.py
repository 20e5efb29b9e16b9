"""The figures of the request form's feedback rounds (``bench/approval_scale.py``): p50/p99 of the
feedback and of the placement dry run alone per checkout, the engine's decisions per dry run, the
target's MET / NOT MET, and the ratios of a baseline checkout's figures to this one's."""

from __future__ import annotations

import statistics
from typing import Any

FEEDBACK_TARGET_MS = 100.0


def _ms(values: list[float], share: float) -> float:
    """The ``share`` quantile of ``values`` (seconds), in milliseconds."""
    ordered = sorted(values)
    return 1000 * ordered[min(len(ordered) - 1, int(len(ordered) * share))]


def feedback_report(seen: dict[str, dict[str, list[Any]]]) -> None:
    """p50/p99 of the feedback (MET / NOT MET) and of the dry run alone per checkout, and their ratios."""
    for label, figures in seen.items():
        p99 = _ms(figures["latencies"], 0.99)
        print(f"  {label:>13}: p50 {_ms(figures['latencies'], 0.5):6.1f} ms  p99 {p99:6.1f} ms  "
              f"mean {1000 * statistics.fmean(figures['latencies']):6.1f} ms  (target p99 <= "
              f"{FEEDBACK_TARGET_MS:.0f} ms: {'MET' if p99 <= FEEDBACK_TARGET_MS else 'NOT MET'})")
    print("  of which the placement dry run (placement_preview alone, timed after each call):")
    for label, figures in seen.items():
        dry = figures["dry_runs"]
        print(f"  {label:>13}: p50 {_ms(dry, 0.5):6.1f} ms  p99 {_ms(dry, 0.99):6.1f} ms  "
              f"mean {1000 * statistics.fmean(dry):6.1f} ms  engine decisions per dry run: mean "
              f"{statistics.fmean(figures['decisions']):.1f}, most {max(figures['decisions'])}")
    if "baseline" in seen:
        for what, key in (("feedback", "latencies"), ("dry run", "dry_runs")):
            ratios = [_ms(seen["baseline"][key], share) / _ms(seen["this checkout"][key], share)
                      for share in (0.5, 0.99)]
            print(f"  {what}: baseline / this checkout p50 {ratios[0]:.2f}x, p99 {ratios[1]:.2f}x")
