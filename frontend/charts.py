"""Inline SVG charts, drawn here from plain numbers: pure functions, no script, no library, every
text escaped. Colours are presentation attributes (the pages' Content-Security-Policy allows no
inline style), so a chart looks the same wherever its markup goes.

``utilisation_chart``: over time, the GPU-equivalents allocated (a light step area), the part of
them that was busy (a dark step area with a line on top) and the part without a reading, hatched
on top of the busy part; a bucket with no reading at all is a gap in the busy line, hatched up to
what was allocated: unknown is never drawn as idle. Axes in GPU-equivalents and UTC time, an
accessible ``<title>``/``<desc>``, a legend and the numbers as a table in a ``<details>``.
``sparkline``: a fraction 0..1 per bucket as a step line, unknown buckets hatched.
``meter``: a used amount against a total, as a bar.
"""

from __future__ import annotations

import datetime
import html
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from django.utils.safestring import SafeString, mark_safe

from kernel.times import CLOCK, DAY_OF_MONTH, MINUTE, span_utc

WIDTH, HEIGHT = 720, 220
LEFT, RIGHT, TOP, BOTTOM = 48, 10, 10, 24
ALLOCATED_FILL, ALLOCATED_STROKE = "#d4e5f7", "#0b5cad"
USED_FILL, USED_STROKE = "#0b5cad", "#084a8c"
HATCH_STROKE = "#57606a"
GRID, LABEL = "#d0d7de", "#57606a"
TIME_STEPS = (3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 2 * 86400, 7 * 86400)
MAX_TIME_TICKS = 8
TIME_LABEL_HALF_WIDTH = 22  # half the width of a day label ("05 Dec") or an hour label ("14:00") at font-size 11, with a margin
_ID = re.compile(r"[^A-Za-z0-9_-]")


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def number(value: float) -> str:
    """At most two decimals, no trailing zeros: 4.0 → 4, 0.25 → 0.25, 2.345 → 2.35."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def coordinate(value: float) -> str:
    return f"{value:.1f}"


@dataclass(frozen=True)
class ChartBucket:
    """One bucket of a utilisation chart, in GPU-equivalents (means over [start, end))."""

    start: datetime.datetime
    end: datetime.datetime
    allocated: float
    used: float | None  # None: no reading at all
    unknown: float  # allocated without a reading (hatched above ``used``)


@dataclass(frozen=True)
class Frame:
    """Maps times (epoch seconds) and values onto the plot area."""

    t0: float
    t1: float
    top: float  # the value at the top of the plot
    width: float = WIDTH
    height: float = HEIGHT

    @property
    def plot_width(self) -> float:
        return self.width - LEFT - RIGHT

    @property
    def plot_height(self) -> float:
        return self.height - TOP - BOTTOM

    def x(self, moment: datetime.datetime | float) -> float:
        at = moment.timestamp() if isinstance(moment, datetime.datetime) else moment
        return LEFT + (at - self.t0) / (self.t1 - self.t0) * self.plot_width

    def y(self, value: float) -> float:
        return TOP + self.plot_height - min(value, self.top) / self.top * self.plot_height


def nice_top(value: float) -> tuple[float, float]:
    """A round top for the y axis at or above ``value`` and its tick step (at most 5 steps)."""
    if value <= 0:
        return 1.0, 0.25
    magnitude = 10 ** math.floor(math.log10(value / 5))
    for factor in (1, 2, 2.5, 5, 10):
        step = factor * magnitude
        if value / step <= 5 + 1e-9:
            return math.ceil(value / step - 1e-9) * step, step
    return value, value / 5  # not reached


def time_ticks(t0: float, t1: float) -> list[tuple[float, str]]:
    """UTC tick positions (epoch seconds) and labels: hours within a few days, dates beyond."""
    span = t1 - t0
    step = next((step for step in TIME_STEPS if span / step <= MAX_TIME_TICKS), TIME_STEPS[-1])
    first = math.ceil(t0 / step) * step
    fmt = CLOCK if step < 86400 else DAY_OF_MONTH
    return [
        (at, datetime.datetime.fromtimestamp(at, tz=datetime.UTC).strftime(fmt))
        for at in range(int(first), int(t1) + 1, step)
    ]


def _steps(frame: Frame, buckets: Sequence[ChartBucket], values: Sequence[float]) -> str:
    """The line over consecutive buckets at ``values``, as path commands after a moveto."""
    parts = []
    for bucket, value in zip(buckets, values, strict=True):
        y = coordinate(frame.y(value))
        parts.append(f"L{coordinate(frame.x(bucket.start))} {y} L{coordinate(frame.x(bucket.end))} {y}")
    return " ".join(parts)


def _area(frame: Frame, buckets: Sequence[ChartBucket], values: Sequence[float]) -> str:
    base = coordinate(frame.y(0))
    start, end = coordinate(frame.x(buckets[0].start)), coordinate(frame.x(buckets[-1].end))
    return f"M{start} {base} {_steps(frame, buckets, values)} L{end} {base} Z"


def known_runs(buckets: Sequence[ChartBucket]) -> list[list[ChartBucket]]:
    """The runs of consecutive buckets with a reading (``used`` not None)."""
    runs: list[list[ChartBucket]] = []
    previous: ChartBucket | None = None
    for bucket in buckets:
        if bucket.used is None:
            previous = None
            continue
        if previous is not None and previous.end == bucket.start:
            runs[-1].append(bucket)
        else:
            runs.append([bucket])
        previous = bucket
    return runs


def safe_id(text: str) -> str:
    return _ID.sub("-", text) or "chart"


def _hatch(pattern_id: str) -> str:
    return (f'<pattern id="{pattern_id}" width="6" height="6" patternUnits="userSpaceOnUse" '
            f'patternTransform="rotate(45)"><rect width="6" height="6" fill="#ffffff"></rect>'
            f'<line x1="0" y1="0" x2="0" y2="6" stroke="{HATCH_STROKE}" stroke-width="2"></line></pattern>')  # fmt: skip


def _axes(frame: Frame, step: float, unit: str) -> list[str]:
    parts = [f'<rect x="{LEFT}" y="{TOP}" width="{coordinate(frame.plot_width)}" height="{coordinate(frame.plot_height)}" '
             f'fill="#f6f8fa" stroke="{GRID}"></rect>']  # fmt: skip
    value = 0.0
    while value <= frame.top + 1e-9:
        y = coordinate(frame.y(value))
        parts.append(f'<line class="chart-grid" x1="{LEFT}" x2="{coordinate(LEFT + frame.plot_width)}" y1="{y}" y2="{y}" '
                     f'stroke="{GRID}"></line>')  # fmt: skip
        parts.append(f'<text x="{LEFT - 4}" y="{y}" dy="4" text-anchor="end" font-size="11" fill="{LABEL}">'
                     f"{esc(number(value))}</text>")  # fmt: skip
        value += step
    for at, label in time_ticks(frame.t0, frame.t1):
        x = coordinate(frame.x(at))
        # A label centred on a tick near the right edge would run past it (the last one was cut):
        # it ends on its tick instead.
        anchor = "end" if frame.x(at) + TIME_LABEL_HALF_WIDTH > frame.width else "middle"
        parts.append(f'<line x1="{x}" x2="{x}" y1="{TOP}" y2="{coordinate(TOP + frame.plot_height)}" stroke="{GRID}"></line>')
        parts.append(f'<text class="chart-time" x="{x}" y="{HEIGHT - 6}" text-anchor="{anchor}" font-size="11" '
                     f'fill="{LABEL}">{esc(label)}</text>')  # fmt: skip
    middle = coordinate(TOP + frame.plot_height / 2)
    parts.append(f'<text transform="rotate(-90)" x="-{middle}" y="12" text-anchor="middle" font-size="11" '
                 f'fill="{LABEL}">{esc(unit)}</text>')  # fmt: skip
    return parts


def describe(buckets: Sequence[ChartBucket]) -> str:
    """The chart in words: means over the range, the busy share where known, the unknown share."""
    if not buckets:
        return "No data."
    seconds = [(bucket.end - bucket.start).total_seconds() for bucket in buckets]
    total = sum(seconds)
    allocated = sum(bucket.allocated * length for bucket, length in zip(buckets, seconds, strict=True))
    unknown = sum(bucket.unknown * length for bucket, length in zip(buckets, seconds, strict=True))
    used = sum((bucket.used or 0) * length for bucket, length in zip(buckets, seconds, strict=True))
    span = (f"From {span_utc(buckets[0].start, buckets[-1].end)}: "
            f"on average {number(allocated / total)} GPU-equivalents allocated")  # fmt: skip
    if allocated <= 0:
        return span + "."
    known = allocated - unknown
    busy = f"{round(100 * used / known)} % of them busy where measured" if known > 0 else "none of them measured"
    return f"{span}, {number(used / total)} busy ({busy}); {round(100 * unknown / allocated)} % without a reading."


def _table(buckets: Sequence[ChartBucket], caption: str) -> str:
    rows = "".join(
        f"<tr><td>{bucket.start:{MINUTE}}</td><td>{number(bucket.allocated)}</td>"
        f"<td>{'unknown' if bucket.used is None else number(bucket.used)}</td><td>{number(bucket.unknown)}</td></tr>"
        for bucket in buckets
    )
    return (f'<details class="chart-data"><summary>The numbers</summary><div class="table-scroll"><table>'
            f"<caption>{esc(caption)}</caption><thead><tr><th scope=\"col\">From (UTC)</th>"
            f'<th scope="col">Allocated</th><th scope="col">Busy</th><th scope="col">Without a reading</th></tr></thead>'
            f"<tbody>{rows}</tbody></table></div></details>")  # fmt: skip


def bucket_label(bucket: ChartBucket, unit: str = "GPU-eq.") -> str:
    """One bucket's values in words, as a point of the chart tells them on hover and focus."""
    busy = "busy unknown (no reading)" if bucket.used is None else f"{number(bucket.used)} busy"
    return (f"{bucket.start.strftime(MINUTE)} to {bucket.end.strftime(CLOCK)} UTC: {number(bucket.allocated)} {unit} allocated, "
            f"{busy}, {number(bucket.unknown)} without a reading")  # fmt: skip


def point(*, label: str, x: float, width: float, y: float, height: float, first: bool) -> str:
    """A bucket's hit area: its values as a tooltip (``<title>``) and as the accessible name of a
    focusable point. One point of a chart is in the tab order; the arrow keys move between them
    (portal.js), which also writes the focused or pointed-at point's values under the chart."""
    return (f'<rect class="chart-point" x="{coordinate(x)}" y="{coordinate(y)}" width="{coordinate(max(width, 1.0))}" '
            f'height="{coordinate(height)}" fill="#0b5cad" fill-opacity="0" tabindex="{0 if first else -1}" '
            f'role="img" aria-label="{esc(label)}"><title>{esc(label)}</title></rect>')  # fmt: skip


def readout(ident: str) -> str:
    return (f'<p class="chart-readout muted" id="{esc(ident)}-readout" aria-live="polite">Point at the chart, or '
            f"focus it (Tab, then the arrow keys), to read each bucket's values.</p>")


def _points(frame: Frame, buckets: Sequence[ChartBucket], unit: str) -> str:
    return "".join(
        point(label=bucket_label(bucket, unit), x=frame.x(bucket.start), width=frame.x(bucket.end) - frame.x(bucket.start),
              y=TOP, height=frame.plot_height, first=index == 0)
        for index, bucket in enumerate(buckets)
    )  # fmt: skip


def _legend(pattern_id: str) -> str:
    def swatch(fill: str, stroke: str) -> str:
        return (f'<svg width="14" height="14" aria-hidden="true" focusable="false"><rect width="14" height="14" '
                f'fill="{fill}" stroke="{stroke}"></rect></svg>')  # fmt: skip

    hatch = (f'<svg width="14" height="14" aria-hidden="true" focusable="false"><defs>{_hatch(pattern_id + "-key")}'
             f'</defs><rect width="14" height="14" fill="url(#{pattern_id}-key)" stroke="{HATCH_STROKE}"></rect></svg>')  # fmt: skip
    return (f'<ul class="map-legend chart-legend"><li>{swatch(ALLOCATED_FILL, ALLOCATED_STROKE)} allocated</li>'
            f"<li>{swatch(USED_FILL, USED_STROKE)} busy</li><li>{hatch} no reading (unknown, not idle)</li></ul>")


def utilisation_chart(
    *, buckets: Sequence[ChartBucket], title: str, chart_id: str, unit: str = "GPU-eq.", description: str | None = None
) -> SafeString:
    """A figure: the SVG chart, its legend and its numbers (see the module docstring)."""
    ident = safe_id(chart_id)
    if not buckets:
        return mark_safe(f'<p class="muted" id="{esc(ident)}">{esc(title)}: no data in this range.</p>')  # noqa: S308
    peak = max(max(bucket.allocated, (bucket.used or 0) + bucket.unknown) for bucket in buckets)
    top, step = nice_top(peak)
    frame = Frame(t0=buckets[0].start.timestamp(), t1=buckets[-1].end.timestamp(), top=top)
    hatch_id = f"{ident}-hatch"
    parts = [
        f'<svg class="util-chart" id="{esc(ident)}" viewBox="0 0 {WIDTH} {HEIGHT}" role="group" '
        f'aria-labelledby="{esc(ident)}-title {esc(ident)}-desc" data-chart-readout="{esc(ident)}-readout">',
        f'<title id="{esc(ident)}-title">{esc(title)}</title>',
        f'<desc id="{esc(ident)}-desc">{esc(description or describe(buckets))}</desc>',
        f"<defs>{_hatch(esc(hatch_id))}</defs>",
        *_axes(frame, step, unit),
        f'<path class="chart-allocated" d="{_area(frame, buckets, [bucket.allocated for bucket in buckets])}" '
        f'fill="{ALLOCATED_FILL}" stroke="{ALLOCATED_STROKE}" stroke-width="1"></path>',
    ]
    for run in known_runs(buckets):
        used = [bucket.used or 0.0 for bucket in run]
        parts.append(f'<path class="chart-used" d="{_area(frame, run, used)}" fill="{USED_FILL}"></path>')
        first = f"M{coordinate(frame.x(run[0].start))} {coordinate(frame.y(used[0]))} "
        parts.append(f'<path class="chart-used-line" d="{first}{_steps(frame, run, used)}" fill="none" '
                     f'stroke="{USED_STROKE}" stroke-width="2"></path>')  # fmt: skip
    unknown = []
    for bucket in buckets:
        if bucket.unknown > 1e-9:
            base = bucket.used or 0.0
            x0, x1 = coordinate(frame.x(bucket.start)), coordinate(frame.x(bucket.end))
            unknown.append(f"M{x0} {coordinate(frame.y(base + bucket.unknown))} H{x1} V{coordinate(frame.y(base))} H{x0} Z")
    if unknown:
        parts.append(f'<path class="chart-unknown" d="{" ".join(unknown)}" fill="url(#{esc(hatch_id)})"></path>')
    parts.append(f'<g class="chart-points">{_points(frame, buckets, unit)}</g></svg>')
    figure = (f'<figure class="util-figure">{"".join(parts)}{readout(ident)}{_legend(esc(ident))}'
              f"{_table(buckets, title)}</figure>")  # fmt: skip
    return mark_safe(figure)  # noqa: S308 - every text above is escaped


def sparkline(
    *, values: Sequence[float | None], title: str, chart_id: str, width: int = 288, height: int = 40,
    labels: Sequence[str] | None = None,
) -> SafeString:
    """A fraction 0..1 per bucket (oldest first) as a step line; unknown buckets hatched. With
    ``labels`` (one per bucket, what it covers), each bucket is a point telling its value on hover
    and focus, and the values read out under the line."""
    ident = safe_id(chart_id)
    count = max(len(values), 1)

    def x(index: int) -> str:
        return coordinate(index * width / count)

    def y(value: float) -> str:
        return coordinate(2 + (height - 4) * (1 - min(max(value, 0.0), 1.0)))

    lines, gaps = [], []
    index = 0
    while index < len(values):
        begin = index
        if values[index] is None:
            while index < len(values) and values[index] is None:
                index += 1
            gaps.append(f"M{x(begin)} 0 H{x(index)} V{height} H{x(begin)} Z")
            continue
        steps = []
        while index < len(values) and (value := values[index]) is not None:
            steps.append(f"L{x(index)} {y(value)} L{x(index + 1)} {y(value)}")
            index += 1
        lines.append(f"M{x(begin)} {y(values[begin] or 0.0)} " + " ".join(steps))
    known = [value for value in values if value is not None]
    summary = (f"{title}: mean {round(100 * sum(known) / len(known))} % busy over the measured buckets, "
               f"{round(100 * (len(values) - len(known)) / count)} % of the time without a reading"
               if known else f"{title}: no reading")  # fmt: skip
    parts = [
        f'<svg class="sparkline" id="{esc(ident)}" viewBox="0 0 {width} {height}" preserveAspectRatio="none" role="img" '
        f'aria-labelledby="{esc(ident)}-title">',
        f'<title id="{esc(ident)}-title">{esc(summary)}</title>',
        f"<defs>{_hatch(esc(ident) + '-hatch')}</defs>",
        f'<rect width="{width}" height="{height}" fill="#f6f8fa"></rect>',
    ]
    if gaps:
        parts.append(f'<path class="spark-unknown" d="{" ".join(gaps)}" fill="url(#{esc(ident)}-hatch)" opacity="0.5"></path>')
    for line in lines:
        parts.append(f'<path class="spark-line" d="{line}" fill="none" stroke="{USED_STROKE}" stroke-width="1.5" '
                     f'vector-effect="non-scaling-stroke"></path>')  # fmt: skip
    if labels is None:
        parts.append("</svg>")
        return mark_safe("".join(parts))  # noqa: S308 - every text above is escaped
    parts[0] = parts[0].replace(' role="img" ', f' role="group" data-chart-readout="{esc(ident)}-readout" ', 1)
    parts.append("".join(
        point(label=f"{label}: {'no reading (unknown)' if value is None else f'{round(100 * value)} % busy'}",
              x=index * width / count, width=width / count, y=0, height=height, first=index == 0)
        for index, (label, value) in enumerate(zip(labels, values, strict=True))
    ))  # fmt: skip
    parts.append("</svg>")
    return mark_safe(f'<div class="spark-figure">{"".join(parts)}{readout(ident)}</div>')  # noqa: S308 - escaped


def meter(*, used: float, total: float, label: str) -> SafeString:
    """``used`` against ``total`` as a bar (beyond the total: full, in the warning colour)."""
    ratio = used / total if total > 0 else 0.0
    width = coordinate(min(ratio, 1.0) * 100)
    tone = "bar-full" if ratio > 1 else "bar-fill"
    fill = "#b42318" if ratio > 1 else "#0b5cad"
    return mark_safe(  # noqa: S308 - every text is escaped
        f'<svg class="bar-svg meter" viewBox="0 0 100 10" preserveAspectRatio="none" role="img" aria-label="{esc(label)}">'
        f'<rect class="bar-track" width="100" height="10" fill="#eaeef2"></rect>'
        f'<rect class="{tone}" width="{width}" height="10" fill="{fill}"></rect></svg>'
    )
