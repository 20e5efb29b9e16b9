"""The simulator in the suite (docs/simulation.md): its budget, GPUPORTAL_SIM_SEEDS seeds (default
1-20) of GPUPORTAL_SIM_STEPS steps (default 300) with every invariant after every step; a mutation
check when GPUPORTAL_SIM_MUTATION names one; and the properties the simulator itself relies on."""

from __future__ import annotations

import sys

import pytest

from tests.conftest import requires_postgres
from tests.simulation.actions import actions_generate
from tests.simulation.session import Options, mutation_check, seeds_parse, simulate

POSTGRES: pytest.MarkDecorator = requires_postgres()
APART: pytest.MarkDecorator = pytest.mark.apart  # long: beside the rest, on a database of its own (tests/pure.py)


@POSTGRES
@APART
@pytest.mark.django_db(transaction=True)
def test_every_invariant_holds_over_the_simulated_budget() -> None:
    options = Options.from_environment()
    if options.mutation:
        pytest.skip("a mutation check runs instead (test_the_mutation_is_caught_within_the_budget)")
    summary, reports = simulate(options)
    sys.stdout.write(summary.text() + "\n" + "".join(report + "\n" for report in reports))
    assert not reports, "\n\n".join([summary.text(), *reports])


@POSTGRES
@APART
@pytest.mark.django_db(transaction=True)
def test_the_mutation_is_caught_within_the_budget() -> None:
    options = Options.from_environment()
    if not options.mutation:
        pytest.skip("GPUPORTAL_SIM_MUTATION names no mutation")
    summary, caught = mutation_check(options)
    sys.stdout.write(summary.text() + "\n" + (caught or f"mutation {options.mutation} NOT caught") + "\n")
    assert caught is not None, f"mutation {options.mutation} was not caught in {summary.steps} steps"


def test_a_seed_always_gives_the_same_stream_and_a_longer_run_extends_it() -> None:
    assert actions_generate(7, 300) == actions_generate(7, 300)
    assert actions_generate(7, 500)[:300] == actions_generate(7, 300)
    assert actions_generate(7, 50) != actions_generate(8, 50)


def test_seed_lists_read_as_ranges_and_singles() -> None:
    assert seeds_parse("1-3,7,10-11") == [1, 2, 3, 7, 10, 11]
