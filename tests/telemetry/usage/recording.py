"""Recorded exporter output replayed into a real Prometheus on loopback.

A fixture under ``fixtures/`` is one scrape, as dcgm-exporter (or HAMi's vGPU monitor) prints it
with Prometheus's target labels added: OpenMetrics text ending with ``# EOF``. ``replay`` turns it
into an hour of samples every 15 s at fixed past times (``T0`` + 7 s + 15 s × k, k = 0..239; the
7 s keep samples off the bucket edges), each series holding its recorded value unless a ``Vary``
gives it another value, or none (a missing scrape), at some steps. ``prometheus_serving`` converts
such files with ``promtool tsdb create-blocks-from openmetrics`` and serves them with
``prometheus`` on a free loopback port (used by the tests' fixture and by bench/utilisation.py).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests
from prometheus_client.openmetrics.parser import text_string_to_metric_families

PROMETHEUS = Path("/usr/bin/prometheus")
PROMTOOL = Path("/usr/bin/promtool")
FIXTURES = Path(__file__).resolve().parent / "fixtures"

T0 = datetime.datetime(2024, 1, 1, 10, 0, tzinfo=datetime.UTC)
STEP = 15
OFFSET = 7
SAMPLES = 240


def at_step(k: int) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=OFFSET + STEP * k)


def steps_of_bucket(start: datetime.datetime) -> range:
    """The sample indexes that fall in the 5-minute bucket beginning at ``start``."""
    first = int((start - T0).total_seconds()) // STEP
    return range(first, first + 300 // STEP)


@dataclass(frozen=True)
class Vary:
    """Another value for the series of ``metric`` whose labels include ``match``: ``value(k,
    recorded)`` at step k, or None for no sample at that step."""

    metric: str
    match: Mapping[str, str]
    value: Callable[[int, float], float | None]

    def applies(self, name: str, labels: Mapping[str, str]) -> bool:
        return name == self.metric and all(labels.get(key) == wanted for key, wanted in self.match.items())


def alternate(first: float, second: float) -> Callable[[int, float], float | None]:
    return lambda k, recorded: first if k % 2 == 0 else second


def peak_at(step: int, value: float) -> Callable[[int, float], float | None]:
    return lambda k, recorded: value if k == step else recorded


def missing(steps: Iterable[int]) -> Callable[[int, float], float | None]:
    gone = set(steps)
    return lambda k, recorded: None if k in gone else recorded


@dataclass
class Scrape:
    """One recorded scrape: (metric, labels, value) in the file's order, with the families' HELP."""

    series: list[tuple[str, dict[str, str], float]] = field(default_factory=list)
    help: dict[str, str] = field(default_factory=dict)


def read_scrape(text: str) -> Scrape:
    scrape = Scrape()
    for family in text_string_to_metric_families(text):  # type: ignore[no-untyped-call]
        scrape.help[family.name] = family.documentation
        for sample in family.samples:
            scrape.series.append((sample.name, dict(sample.labels), float(sample.value)))
    return scrape


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def series_line(name: str, labels: Mapping[str, str], value: float, at: int) -> str:
    body = ",".join(f'{key}="{text}"' for key, text in labels.items())
    return f"{name}{{{body}}} {_number(value)} {at}"


def replay(text: str, *, varies: Sequence[Vary] = (), samples: int = SAMPLES) -> str:
    """The scrape ``text`` as OpenMetrics with timestamps (seconds), ``samples`` steps from ``T0``."""
    scrape = read_scrape(text)
    lines: list[str] = []
    seen: set[str] = set()
    for name, labels, recorded in scrape.series:
        if name not in seen:
            seen.add(name)
            lines += [f"# HELP {name} {scrape.help.get(name, name)}", f"# TYPE {name} gauge"]
        vary = next((item for item in varies if item.applies(name, labels)), None)
        for k in range(samples):
            value = vary.value(k, recorded) if vary is not None else recorded
            if value is not None:
                lines.append(series_line(name, labels, value, int(at_step(k).timestamp())))
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


def binaries() -> tuple[Path, Path]:
    """Debian's prometheus and promtool; skip without them, unless GPUPORTAL_REQUIRE_PROMETHEUS=1."""
    if PROMETHEUS.exists() and PROMTOOL.exists():
        return PROMETHEUS, PROMTOOL
    if os.environ.get("GPUPORTAL_REQUIRE_PROMETHEUS") == "1":
        pytest.fail("prometheus or promtool is missing from /usr/bin (make prometheus installs Debian's package)")
    pytest.skip("prometheus is not installed (make prometheus)")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.contextmanager
def prometheus_serving(files: Sequence[Path], workdir: Path, *, ready_within: float = 60.0) -> Iterator[str]:
    """Load the OpenMetrics ``files`` into a fresh TSDB under ``workdir`` and serve it on loopback;
    yields the base URL and stops the server afterwards."""
    prometheus, promtool = binaries()
    data = workdir / "data"
    for path in files:
        done = subprocess.run(
            [str(promtool), "tsdb", "create-blocks-from", "openmetrics", str(path), str(data)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"promtool could not convert {path.name}: {done.stderr or done.stdout}")
    config = workdir / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1h\nscrape_configs: []\n")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = (workdir / "prometheus.log").open("w")
    process = subprocess.Popen(
        [str(prometheus), f"--config.file={config}", f"--storage.tsdb.path={data}", "--storage.tsdb.retention.time=100y",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + ready_within
        while True:
            if process.poll() is not None:
                raise RuntimeError("prometheus exited: " + (workdir / "prometheus.log").read_text()[-2000:])
            with contextlib.suppress(requests.RequestException):
                if requests.get(f"{url}/-/ready", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(
                    "prometheus was not ready in time: " + (workdir / "prometheus.log").read_text()[-2000:]
                )
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
