"""The utilisation sample tiers: raw samples (one per GPU per report, written by the ingest) rolled
up into 5-minute and hourly means, and each tier trimmed to its retention."""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import Any

from django.db import models, transaction
from django.db.models import Avg, Count

from kernel.clock import clock_now
from telemetry import conf
from telemetry.models import GpuSample, SampleRollup, SampleTier

BUCKET_SECONDS = {SampleTier.FIVE_MINUTES: 300, SampleTier.HOUR: 3600}
# Buckets this far before the mark are computed again: a report delivered late (after retries)
# still lands in its bucket's mean.
ROLLUP_OVERLAP = datetime.timedelta(minutes=15)
TRIM_BATCH = 5000


class EpochBucket(models.Func):
    """The start of the ``seconds``-long bucket a timestamp falls in, as seconds since the epoch."""

    output_field = models.BigIntegerField()

    def __init__(self, expression: str, *, seconds: int) -> None:
        super().__init__(models.F(expression))
        self.seconds = int(seconds)

    def as_postgresql(self, compiler: Any, connection: Any, **extra_context: Any) -> Any:
        template = f"(FLOOR(EXTRACT(EPOCH FROM %(expressions)s) / {self.seconds}) * {self.seconds})::bigint"
        return self.as_sql(compiler, connection, template=template, **extra_context)

    def as_sqlite(self, compiler: Any, connection: Any, **extra_context: Any) -> Any:
        # SQLite keeps datetimes as UTC text; strftime('%s') reads them as seconds since the epoch.
        # '%%%%s' is '%%s' in the SQL, which the backend turns into a literal '%s' (not a parameter).
        template = f"(CAST(strftime('%%%%s', %(expressions)s) AS INTEGER) / {self.seconds}) * {self.seconds}"
        return self.as_sql(compiler, connection, template=template, **extra_context)


def _floor(moment: datetime.datetime, seconds: int) -> datetime.datetime:
    epoch = int(moment.timestamp())
    return datetime.datetime.fromtimestamp(epoch - epoch % seconds, tz=datetime.UTC)


def gpu_samples_roll_up(*, now: datetime.datetime | None = None) -> dict[str, int]:
    """Compute the 5-minute and hourly means of the raw samples for every bucket that has ended
    since the last run (and those within ``ROLLUP_OVERLAP`` before it, again). Idempotent."""
    moment = now or clock_now()
    written: dict[str, int] = {}
    oldest_raw = moment - conf.raw_retention()
    for tier, seconds in BUCKET_SECONDS.items():
        end = _floor(moment, seconds)
        mark = SampleRollup.objects.filter(tier=tier).first()
        if mark is not None:
            start = _floor(mark.rolled_until - ROLLUP_OVERLAP, seconds)
        else:
            first = GpuSample.objects.filter(tier=SampleTier.RAW).order_by("at").values_list("at", flat=True).first()
            start = _floor(first, seconds) if first is not None else end
        start = max(start, _floor(oldest_raw, seconds))
        count = _roll_up_window(tier, seconds, start, end) if start < end else 0
        SampleRollup.objects.update_or_create(tier=tier, defaults={"rolled_until": end})
        written[SampleTier(tier).label] = count
    return written


def _roll_up_window(tier: int, seconds: int, start: datetime.datetime, end: datetime.datetime) -> int:
    means = (
        GpuSample.objects.filter(tier=SampleTier.RAW, at__gte=start, at__lt=end)
        .annotate(bucket=EpochBucket("at", seconds=seconds))
        .values("gpu_id", "bucket")
        .annotate(
            n=Count("id"), gpu_percent_mean=Avg("gpu_percent"), memory_percent_mean=Avg("memory_percent"),
            memory_used_mean=Avg("memory_used_bytes"), temperature_mean=Avg("temperature_celsius"),
            power_mean=Avg("power_milliwatts"),
        )
        .order_by()
    )  # fmt: skip
    rows = [
        GpuSample(
            gpu_id=mean["gpu_id"], tier=tier, at=datetime.datetime.fromtimestamp(mean["bucket"], tz=datetime.UTC),
            samples=mean["n"], gpu_percent=mean["gpu_percent_mean"], memory_percent=mean["memory_percent_mean"],
            memory_used_bytes=mean["memory_used_mean"], temperature_celsius=mean["temperature_mean"],
            power_milliwatts=mean["power_mean"],
        )
        for mean in means.iterator(chunk_size=5000)
    ]  # fmt: skip
    with transaction.atomic():
        GpuSample.objects.bulk_create(
            rows,
            batch_size=2000,
            update_conflicts=True,
            unique_fields=["gpu", "tier", "at"],
            update_fields=["samples", "gpu_percent", "memory_percent", "memory_used_bytes", "temperature_celsius", "power_milliwatts"],
        )
    return len(rows)


def _retention(tier: int) -> datetime.timedelta:
    return {
        SampleTier.RAW: conf.raw_retention(),
        SampleTier.FIVE_MINUTES: conf.five_minute_retention(),
        SampleTier.HOUR: conf.hourly_retention(),
    }[SampleTier(tier)]


def gpu_samples_trim(*, now: datetime.datetime | None = None, tiers: Iterable[int] = tuple(SampleTier)) -> dict[str, int]:
    """Delete samples older than their tier's retention, in batches. Raw samples are kept until
    both downsampled tiers have covered them."""
    moment = now or clock_now()
    deleted: dict[str, int] = {}
    marks = list(SampleRollup.objects.values_list("rolled_until", flat=True))
    for tier in tiers:
        cutoff = moment - _retention(tier)
        if tier == SampleTier.RAW and marks:
            cutoff = min([cutoff, *(mark - ROLLUP_OVERLAP for mark in marks)])
        total = 0
        while True:
            batch = list(
                GpuSample.objects.filter(tier=tier, at__lt=cutoff).order_by("at").values_list("id", flat=True)[:TRIM_BATCH]
            )
            if not batch:
                break
            total += GpuSample.objects.filter(id__in=batch).delete()[0]
        deleted[SampleTier(tier).label] = total
    return deleted
