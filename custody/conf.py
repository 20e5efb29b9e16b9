"""Custody settings, read at call time (defaults and the environment: ``gpuportal/settings.py``;
docs/custody.md says what each serves).

========================================== =====================================================
setting                                    meaning
========================================== =====================================================
GPUPORTAL_CUSTODY_GAP_INTERVALS            a report later than this many intervals after the
                                           last one leaves a gap (a report was lost or late)
GPUPORTAL_CUSTODY_CLOCK_TOLERANCE_SECONDS  an agent clock further off than this lowers the
                                           confidence of what its reports say
========================================== =====================================================
"""

from __future__ import annotations

import datetime

from kernel.conf import setting_float


def gap_after(interval_seconds: int) -> datetime.timedelta:
    return datetime.timedelta(seconds=setting_float("GPUPORTAL_CUSTODY_GAP_INTERVALS") * interval_seconds)


def clock_tolerance_seconds() -> float:
    return setting_float("GPUPORTAL_CUSTODY_CLOCK_TOLERANCE_SECONDS")
