"""Trace replay for the placement benchmark (``../shared/reference/placement-benchmark.md`` §2, §7)."""
