"""The twin's formats: workloads (JSON Lines and CSV), clusters and policies, and errors that name
the line (or entry) and the field (docs/twin.md)."""

from __future__ import annotations

import json

import pytest

from twin.clusters import nodes_read, nodes_write
from twin.errors import TwinInputError
from twin.policy import policy_read, policy_write
from twin.workload import Shape, jobs_read, jobs_write

pytestmark = pytest.mark.pure  # no database: runs beside the suite (tests/pure.py)

BASE = {"submit_at": 0, "department": "nlp", "project": "nlp-a", "num_gpu": 1, "gpu_milli": 500, "quantity": 2,
        "runtime_s": 600, "requested_s": 3600, "priority_class": "gpu-standard", "busy": 0.4}


def lines(*records: dict[str, object]) -> str:
    return "".join(json.dumps(record) + "\n" for record in records)


def error_of(text: str, fmt: str = "jsonl", **options: object) -> tuple[int | str, str]:
    with pytest.raises(TwinInputError) as caught:
        jobs_read(text, source="w", fmt=fmt, **options)  # type: ignore[arg-type]
    return caught.value.line, caught.value.field


def test_a_line_reads_into_a_request_and_writes_back_the_same() -> None:
    text = lines(BASE, {**BASE, "submit_at": 30, "num_gpu": 8, "gpu_milli": 1000, "gpu_model": "V100M16|V100M32",
                        "starts_at": 90})
    jobs = jobs_read(text)
    assert [job.shape for job in jobs] == [Shape(1, 500), Shape(8, 1000, frozenset({"V100M16", "V100M32"}))]
    assert jobs[0].milli == 1000 and jobs[1].eligible_at == 90
    assert jobs_read(jobs_write(jobs)) == jobs
    again = jobs_read(jobs_write(jobs, fmt="csv"), fmt="csv")
    assert [(j.submit_at, j.shape, j.starts_at) for j in again] == [(j.submit_at, j.shape, j.starts_at) for j in jobs]


def test_iso_moments_become_seconds_from_the_first() -> None:
    text = lines({**BASE, "submit_at": "2026-03-02T10:00:00+01:00"}, {**BASE, "submit_at": "2026-03-02T09:30:00Z"})
    assert [job.submit_at for job in jobs_read(text)] == [0.0, 1800.0]


@pytest.mark.parametrize(("change", "line", "field"), [
    ({"busy": 1.5}, 2, "busy"),
    ({"requested_s": 60}, 2, "requested_s"),
    ({"num_gpu": 2}, 2, "gpu_milli"),
    ({"quantity": 0}, 2, "quantity"),
    ({"quantity": 1.5}, 2, "quantity"),
    ({"department": ""}, 2, "department"),
    ({"submit_at": "yesterday"}, 2, "submit_at"),
    ({"submit_at": "2026-03-02T09:30:00"}, 2, "submit_at"),
    ({"colour": "red"}, 2, "colour"),
    ({"flavor": "a100"}, 2, "num_gpu"),
    ({"starts_at": -5}, 2, "starts_at"),
])
def test_a_bad_value_names_its_line_and_field(change: dict[str, object], line: int, field: str) -> None:
    assert error_of(lines(BASE, {**BASE, **change})) == (line, field)


def test_missing_fields_and_bad_lines_are_named() -> None:
    missing = {key: value for key, value in BASE.items() if key != "runtime_s"}
    assert error_of(lines(BASE, missing)) == (2, "runtime_s")
    assert error_of(lines(BASE) + "{not json\n") == (2, "(line)")
    assert error_of(lines(BASE, {**BASE, "submit_at": "2026-03-02T09:30:00Z"})) == (2, "submit_at")  # mixed


def test_csv_lines_count_the_header_and_flavors_resolve_against_the_catalogue() -> None:
    header = "submit_at,department,project,flavor,quantity,runtime_s,requested_s,priority_class,busy\n"
    text = header + "0,nlp,p,half,1,60,60,gpu-standard,0.5\n5,nlp,p,nope,1,60,60,gpu-standard,0.5\n"
    assert error_of(text, "csv", flavors={"half": Shape(1, 500)}) == (3, "flavor")
    jobs = jobs_read(header + "0,nlp,p,half,1,60,60,gpu-standard,0.5\n", fmt="csv", flavors={"half": Shape(1, 500)})
    assert jobs[0].shape == Shape(1, 500) and jobs[0].flavor == "half"


def test_a_cluster_file_reads_the_alibaba_columns_and_names_a_bad_one() -> None:
    text = "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,P100\nn1,96000,393216,8,G2\n"
    nodes = nodes_read(text)
    assert [(n.name, len(n.gpus), n.gpus[0].model) for n in nodes] == [("n0", 2, "P100"), ("n1", 8, "G2")]
    assert nodes_read(nodes_write(nodes)) == nodes
    for bad, field in (("n2,1,1,x,T4", "gpu"), ("n2,1,1,2,", "model"), ("n0,1,1,1,T4", "sn")):
        with pytest.raises(TwinInputError) as caught:
            nodes_read(text + bad + "\n", source="c.csv")
        assert (caught.value.line, caught.value.field) == (4, field)
    with pytest.raises(TwinInputError, match="c.csv:1: model: missing column"):
        nodes_read("sn,cpu_milli,memory_mib,gpu\n", source="c.csv")


POLICY = """
departments:
  - {name: nlp, guarantee: 10, limit: 40}
  - {name: vision, guarantee: 6}
priority_classes:
  - {name: gpu-standard, value: 10000, notice_minutes: 5}
  - {name: gpu-preemptible, value: 1000, preemption: Never, oversubscription_factor: 1.5, preemptible: true}
flavors:
  - {name: half, num_gpu: 1, gpu_milli: 500, gpu_model: A100}
"""


def test_a_policy_file_reads_and_writes_back() -> None:
    policy = policy_read(POLICY)
    assert [(d.name, float(d.guarantee), float(d.limit)) for d in policy.departments] == [
        ("nlp", 10, 40), ("vision", 6, 6)]
    assert policy.classes["gpu-preemptible"].notice_s == 0 and policy.classes["gpu-standard"].notice_s == 300
    assert policy.reclaim_notice_s == 300 and policy.flavors["half"] == Shape(1, 500, frozenset({"A100"}))
    assert policy_read(policy_write(policy)) == policy


@pytest.mark.parametrize(("bad", "where", "key"), [
    ("  - {name: vision, guarantee: 6, limit: 2}", "departments[1]", "limit"),
    ("  - {name: vision, guarantee: -1}", "departments[1]", "guarantee"),
    ("  - {name: nlp, guarantee: 1}", "departments[1]", "name"),
])
def test_a_bad_policy_entry_names_the_entry_and_the_key(bad: str, where: str, key: str) -> None:
    with pytest.raises(TwinInputError) as caught:
        policy_read(POLICY.replace("  - {name: vision, guarantee: 6}", bad), source="p.yaml")
    assert (caught.value.line, caught.value.field) == (where, key)
    with pytest.raises(TwinInputError, match="priority_classes\\[0\\]: preemption"):
        policy_read(POLICY.replace("notice_minutes: 5", "preemption: Sometimes"))


@pytest.mark.parametrize(("departments", "where", "message"), [
    ("  - {name: nlp, guarantee: 10, parent: acme}\n  - {name: vision, guarantee: 6}", "departments[0]",
     "no department 'acme'"),
    ("  - {name: nlp, guarantee: 10, parent: nlp}\n  - {name: vision, guarantee: 6}", "departments[0]",
     "a cycle: nlp → nlp"),
    ("  - {name: nlp, guarantee: 10, parent: vision}\n  - {name: vision, guarantee: 6, parent: nlp}", "departments[0]",
     "a cycle: nlp → vision → nlp"),
])
def test_a_parent_names_another_department_without_a_cycle(departments: str, where: str, message: str) -> None:
    text = POLICY.replace("  - {name: nlp, guarantee: 10, limit: 40}\n  - {name: vision, guarantee: 6}", departments)
    with pytest.raises(TwinInputError) as caught:
        policy_read(text, source="p.yaml")
    assert (caught.value.line, caught.value.field) == (where, "parent") and message in str(caught.value)


def test_nested_departments_read_and_write_back_and_guarantees_are_not_counted_twice() -> None:
    text = POLICY.replace("  - {name: vision, guarantee: 6}",
                          "  - {name: vision, guarantee: 6, parent: acme}\n  - {name: acme, guarantee: 4, limit: 12}")
    policy = policy_read(text)
    assert policy.department("vision").parent == "acme" and policy.department("nlp").parent is None
    assert policy_read(policy_write(policy)) == policy
    assert policy.guaranteed == 10 + 6  # acme's 4 lies within vision's 6


def test_a_request_naming_an_unknown_department_or_class_is_refused_with_its_line() -> None:
    policy = policy_read(POLICY)
    jobs = jobs_read(lines(BASE, {**BASE, "priority_class": "gold"}))
    with pytest.raises(TwinInputError, match="w:2: priority_class"):
        policy.check_jobs(jobs, source="w")
