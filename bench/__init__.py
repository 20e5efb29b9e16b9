"""The benchmarks: scripts run as ``python bench/<name>.py`` (docs/performance.md), each printing
ratios against a baseline run in the same run and a MET / NOT MET line per target."""
