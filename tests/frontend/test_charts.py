"""The inline SVG charts (pure): values land on the right coordinates, unknown is a gap and hatched
(never drawn as idle), axes are labelled, every text is escaped, the numbers come as a table."""

from __future__ import annotations

import datetime
import re
import xml.etree.ElementTree as ET

import pytest

from frontend.charts import (
    ChartBucket,
    Frame,
    coordinate,
    describe,
    meter,
    nice_top,
    number,
    sparkline,
    time_ticks,
    utilisation_chart,
)

T0 = datetime.datetime(2030, 5, 6, 0, 0, tzinfo=datetime.UTC)
HOUR = datetime.timedelta(hours=1)


def buckets(allocated: list[float], used: list[float | None], unknown: list[float]) -> list[ChartBucket]:
    return [
        ChartBucket(start=T0 + i * HOUR, end=T0 + (i + 1) * HOUR, allocated=a, used=u, unknown=k)
        for i, (a, u, k) in enumerate(zip(allocated, used, unknown, strict=True))
    ]


def chart_svg(markup: str) -> ET.Element:
    match = re.search(r'<svg class="util-chart".*?</svg>', markup, re.S)
    assert match is not None
    return ET.fromstring(match.group(0))  # noqa: S314 - the module's own markup


def paths(svg: ET.Element, kind: str) -> list[str]:
    return [element.attrib["d"] for element in svg.iter("path") if element.attrib.get("class") == kind]


SAMPLE = buckets([2, 2, 4, 4], [1, None, 3, 2], [1, 2, 1, 2])


def test_values_map_onto_the_plot() -> None:
    svg = chart_svg(utilisation_chart(buckets=SAMPLE, title="t", chart_id="c"))
    frame = Frame(t0=T0.timestamp(), t1=(T0 + 4 * HOUR).timestamp(), top=4)
    x = [coordinate(frame.x(T0 + i * HOUR)) for i in range(5)]
    y = {value: coordinate(frame.y(value)) for value in (0, 1, 2, 3, 4)}
    assert (x[0], x[4], y[0], y[4]) == ("48.0", "710.0", "196.0", "10.0")  # the plot's corners
    allocated = f"M{x[0]} {y[0]} " + " ".join(
        f"L{x[i]} {y[value]} L{x[i + 1]} {y[value]}" for i, value in enumerate([2, 2, 4, 4])
    ) + f" L{x[4]} {y[0]} Z"
    assert paths(svg, "chart-allocated") == [allocated]
    assert paths(svg, "chart-used") == [
        f"M{x[0]} {y[0]} L{x[0]} {y[1]} L{x[1]} {y[1]} L{x[1]} {y[0]} Z",
        f"M{x[2]} {y[0]} L{x[2]} {y[3]} L{x[3]} {y[3]} L{x[3]} {y[2]} L{x[4]} {y[2]} L{x[4]} {y[0]} Z",
    ]
    # The unknown part sits on top of the busy part; a bucket without any reading is hatched from 0.
    assert paths(svg, "chart-unknown") == [" ".join([
        f"M{x[0]} {y[2]} H{x[1]} V{y[1]} H{x[0]} Z",
        f"M{x[1]} {y[2]} H{x[2]} V{y[0]} H{x[1]} Z",
        f"M{x[2]} {y[4]} H{x[3]} V{y[3]} H{x[2]} Z",
        f"M{x[3]} {y[4]} H{x[4]} V{y[2]} H{x[3]} Z",
    ])]  # fmt: skip


def test_an_unknown_bucket_is_a_gap_in_the_busy_line_not_a_zero() -> None:
    svg = chart_svg(utilisation_chart(buckets=SAMPLE, title="t", chart_id="c"))
    lines = paths(svg, "chart-used-line")
    assert len(lines) == 2  # broken at the unknown bucket
    frame = Frame(t0=T0.timestamp(), t1=(T0 + 4 * HOUR).timestamp(), top=4)
    gap_start, gap_end = coordinate(frame.x(T0 + HOUR)), coordinate(frame.x(T0 + 2 * HOUR))
    assert lines[0].endswith(f"L{gap_start} {coordinate(frame.y(1))}")
    assert lines[1].startswith(f"M{gap_end} {coordinate(frame.y(3))}")
    zero = coordinate(frame.y(0))
    assert not any(f"L{gap_start} {zero} L{gap_end} {zero}" in line for line in lines)
    assert 'fill="url(#c-hatch)"' in ET.tostring(svg, encoding="unicode")


def test_the_axes_are_labelled_in_gpu_equivalents_and_utc_time() -> None:
    svg = chart_svg(utilisation_chart(buckets=SAMPLE, title="t", chart_id="c"))
    texts = [element.text for element in svg.iter("text")]
    assert texts[:5] == ["0", "1", "2", "3", "4"]
    assert "GPU-eq." in texts
    assert ["00:00", "01:00", "02:00", "03:00", "04:00"] == [t for t in texts if t and ":" in t]
    day = [label for _at, label in time_ticks(T0.timestamp(), (T0 + 24 * HOUR).timestamp())]
    assert day == ["00:00", "03:00", "06:00", "09:00", "12:00", "15:00", "18:00", "21:00", "00:00"]
    month = time_ticks(T0.timestamp(), (T0 + 30 * 24 * HOUR).timestamp())  # weekly, as dates
    assert 4 <= len(month) <= 5 and all(re.fullmatch(r"\d\d [A-Z][a-z]{2}", label) for _at, label in month)
    assert {later - earlier for (earlier, _), (later, _) in zip(month, month[1:], strict=False)} == {7 * 86400}


@pytest.mark.parametrize(("peak", "top", "step"), [(0, 1, 0.25), (4, 4, 1), (12.5, 12.5, 2.5), (0.3, 0.3, 0.1), (7, 8, 2)])
def test_the_y_axis_ends_on_a_round_number(peak: float, top: float, step: float) -> None:
    found_top, found_step = nice_top(peak)
    assert (found_top, found_step) == pytest.approx((top, step))


def test_every_text_is_escaped_and_ids_are_safe() -> None:
    hostile = '<script>alert("x")</script> & "quoted"'
    markup = str(utilisation_chart(buckets=SAMPLE, title=hostile, chart_id='a" onload="x'))
    assert "<script" not in markup and "onload=" not in markup.replace('id="a--onload--x', "")
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &quot;quoted&quot;" in markup
    assert 'id="a--onload--x"' in markup
    svg = chart_svg(markup)
    # a group, not an img: an img's children (the focusable points) would be hidden from assistive technology
    assert svg.attrib["role"] == "group" and svg.attrib["aria-labelledby"] == "a--onload--x-title a--onload--x-desc"
    spark = str(sparkline(values=[0.5, None], title=hostile, chart_id="<s>"))
    assert "<script" not in spark and 'id="-s-"' in spark
    assert "<script" not in str(meter(used=1, total=2, label=hostile))


def test_the_chart_says_in_words_what_it_shows_and_gives_the_numbers() -> None:
    markup = str(utilisation_chart(buckets=SAMPLE, title="Cluster demo", chart_id="c"))
    svg = chart_svg(markup)
    assert svg.find("title") is not None and svg.find("title").text == "Cluster demo"  # type: ignore[union-attr]
    desc = svg.find("desc")
    assert desc is not None and desc.text == describe(SAMPLE)
    # 12 GPU-eq.-hours allocated, 6 busy, 6 without a reading: 6 of the 6 measured are busy (100 %).
    assert describe(SAMPLE) == ("From 2030-05-06 00:00 to 2030-05-06 04:00 UTC: on average 3 GPU-equivalents "
                                "allocated, 1.5 busy (100 % of them busy where measured); 50 % without a reading.")  # fmt: skip
    rows = re.findall(r"<tr><td>([^<]+)</td><td>([^<]+)</td><td>([^<]+)</td><td>([^<]+)</td></tr>", markup)
    assert rows == [("2030-05-06 00:00", "2", "1", "1"), ("2030-05-06 01:00", "2", "unknown", "2"),
                    ("2030-05-06 02:00", "4", "3", "1"), ("2030-05-06 03:00", "4", "2", "2")]  # fmt: skip
    assert "<details" in markup and "no reading (unknown, not idle)" in markup
    assert "no data" in str(utilisation_chart(buckets=[], title="empty", chart_id="e"))


def test_the_sparkline_hatches_unknown_buckets_and_breaks_its_line() -> None:
    markup = str(sparkline(values=[0.0, 1.0, None, None, 0.5], title="a", chart_id="s", width=50, height=40))
    svg = ET.fromstring(markup)  # noqa: S314 - the module's own markup
    lines = [element.attrib["d"] for element in svg.iter("path") if element.attrib.get("class") == "spark-line"]
    assert lines == ["M0.0 38.0 L0.0 38.0 L10.0 38.0 L10.0 2.0 L20.0 2.0", "M40.0 20.0 L40.0 20.0 L50.0 20.0"]
    gaps = [element.attrib["d"] for element in svg.iter("path") if element.attrib.get("class") == "spark-unknown"]
    assert gaps == ["M20.0 0 H40.0 V40 H20.0 Z"]
    assert svg.find("title").text == "a: mean 50 % busy over the measured buckets, 40 % of the time without a reading"  # type: ignore[union-attr]


def test_the_meter_fills_up_to_the_total() -> None:
    assert 'width="25.0"' in str(meter(used=1, total=4, label="m"))
    over = str(meter(used=5, total=4, label="m"))
    assert 'width="100.0"' in over and "bar-full" in over
    assert number(2.0) == "2" and number(0.125) == "0.12" and number(-0.0001) == "0"


def test_each_bucket_tells_its_values_on_hover_and_keyboard_focus() -> None:
    markup = str(utilisation_chart(buckets=SAMPLE, title="t", chart_id="c"))
    svg = chart_svg(markup)
    points = [element for element in svg.iter("rect") if element.attrib.get("class") == "chart-point"]
    assert len(points) == len(SAMPLE)
    assert [point.attrib["tabindex"] for point in points] == ["0", "-1", "-1", "-1"]  # one tab stop, arrows move
    labels = [point.attrib["aria-label"] for point in points]
    assert labels[0] == "2030-05-06 00:00 to 01:00 UTC: 2 GPU-eq. allocated, 1 busy, 1 without a reading"
    assert labels[1] == "2030-05-06 01:00 to 02:00 UTC: 2 GPU-eq. allocated, busy unknown (no reading), 2 without a reading"
    assert [point.find("title").text for point in points] == labels  # type: ignore[union-attr]  # the hover tooltip
    assert [point.attrib["x"] for point in points] == ["48.0", "213.5", "379.0", "544.5"]  # over their buckets
    assert svg.attrib["data-chart-readout"] == "c-readout" and 'id="c-readout" aria-live="polite"' in markup


def test_the_last_time_label_ends_inside_the_chart() -> None:
    """A tick at the chart's right edge had its label centred on it, half of it cut off."""
    six = buckets([1] * 6, [1] * 6, [0] * 6)
    svg = chart_svg(utilisation_chart(buckets=six, title="t", chart_id="c"))
    labels = [(float(text.attrib["x"]), text.attrib["text-anchor"], text.text)
              for text in svg.iter("text") if text.attrib.get("class") == "chart-time"]
    assert labels[-1] == (710.0, "end", "06:00")
    assert all(x + 22 <= 720 for x, anchor, _text in labels if anchor == "middle")
    assert labels[0] == (48.0, "middle", "00:00")


def test_a_labelled_sparkline_tells_each_buckets_value() -> None:
    markup = str(sparkline(values=[0.25, None], title="a", chart_id="s", width=50, height=40,
                           labels=["2030-05-06 00:00 UTC", "2030-05-06 00:05 UTC"]))
    figure = ET.fromstring(markup)  # noqa: S314 - the module's own markup
    svg = figure.find("svg")
    assert svg is not None and svg.attrib["role"] == "group" and svg.attrib["data-chart-readout"] == "s-readout"
    points = [element for element in svg.iter("rect") if element.attrib.get("class") == "chart-point"]
    assert [point.attrib["aria-label"] for point in points] == [
        "2030-05-06 00:00 UTC: 25 % busy", "2030-05-06 00:05 UTC: no reading (unknown)"]
    assert [point.attrib["tabindex"] for point in points] == ["0", "-1"]
    assert figure.find("p") is not None
