"""The worked examples of docs/quotas.md, on the pure algebra: if one of these fails, the page
and the code disagree."""

from __future__ import annotations

from decimal import Decimal

from allocations.quotas import algebra
from allocations.quotas.victims import plan as victims_plan

ACME, NLP, VISION = 1, 2, 3
STANDARD, PRODUCTION, PREEMPTIBLE = 10000, 100000, 1000
D = Decimal


def tree(*, acme_limit: str, nlp: tuple[str, str, str | None] = ("8", "12", None),
         vision: tuple[str, str, str | None] = ("8", "12", None)) -> algebra.Tree:
    limits: dict[tuple[int, algebra.Scope], algebra.Limit] = {
        (ACME, None): algebra.Limit(ACME, None, D(0), D(acme_limit)),
        (NLP, None): algebra.Limit(NLP, None, D(nlp[0]), D(nlp[1]), D(nlp[2]) if nlp[2] else None),
        (VISION, None): algebra.Limit(VISION, None, D(vision[0]), D(vision[1]), D(vision[2]) if vision[2] else None),
    }
    return algebra.Tree(parents={ACME: None, NLP: ACME, VISION: ACME}, limits=limits)


def grant(pk: int, department: int, amount: str, priority: int = STANDARD) -> algebra.Grant:
    return algebra.Grant(pk, department, {None: D(amount)}, priority, age=pk)


def ask(department: int, amount: str, priority: int = STANDARD, *, factor: str = "1",
        preempts: bool = True) -> algebra.Ask:
    return algebra.Ask(department, {None: D(amount)}, priority, D(factor), preempts)


def victims(plan: algebra.Plan) -> list[tuple[int, str]]:
    return [(victim.allocation_id, victim.why) for victim in plan.victims]


def test_example_1_a_department_within_its_guarantee_reclaims_what_a_sibling_borrowed() -> None:
    grants = [grant(1, VISION, "8"), grant(2, VISION, "3.5"), grant(3, NLP, "0.93")]
    plan = victims_plan(tree(acme_limit="14"), grants, ask(NLP, "3"))
    assert plan.admitted and victims(plan) == [(2, "borrowed")]


def test_example_2_a_request_beyond_its_guarantee_reclaims_nothing() -> None:
    grants = [grant(1, VISION, "8"), grant(2, VISION, "3.5"), grant(3, NLP, "0.93")]
    plan = victims_plan(tree(acme_limit="14"), grants, ask(NLP, "9"))
    assert not plan.admitted and plan.victims == ()
    assert [(check.department_id, str(check.holds)) for check in plan.failing] == [(ACME, "12.43")]


def test_example_3_production_takes_back_what_the_departments_own_preemptible_grant_oversubscribes() -> None:
    grants = [grant(1, NLP, "10"), grant(2, NLP, "6", PREEMPTIBLE)]
    plan = victims_plan(tree(acme_limit="32"), grants, ask(NLP, "2", PRODUCTION))
    assert plan.admitted and victims(plan) == [(2, "oversubscribed")]


def test_example_4_preemption_takes_lower_priority_only() -> None:
    grants = [grant(1, NLP, "6"), grant(2, NLP, "6")]
    production = victims_plan(tree(acme_limit="32"), grants, ask(NLP, "1", PRODUCTION))
    assert production.admitted and victims(production) == [(2, "lower-priority")]
    same = victims_plan(tree(acme_limit="32"), grants, ask(NLP, "1", STANDARD))
    assert not same.admitted


def test_example_5_a_lending_limit_keeps_part_of_an_idle_guarantee() -> None:
    held = [grant(1, NLP, "12")]
    lending = tree(acme_limit="18", nlp=("8", "16", None), vision=("8", "12", "4"))
    refused = victims_plan(lending, held, ask(NLP, "4", preempts=False))
    assert not refused.admitted and [(c.department_id, str(c.holds)) for c in refused.failing] == [(ACME, "16")]
    assert victims_plan(lending, held, ask(NLP, "2", preempts=False)).admitted
    lends_all = tree(acme_limit="18", nlp=("8", "16", None))
    assert victims_plan(lends_all, held, ask(NLP, "4", preempts=False)).admitted


def test_example_6_victims_are_the_fewest_that_free_enough() -> None:
    grants = [grant(1, VISION, "8"), grant(2, VISION, "4"), grant(3, VISION, "1"), grant(4, VISION, "1")]
    two = victims_plan(tree(acme_limit="16"), grants, ask(NLP, "4"))
    assert victims(two) == [(4, "borrowed"), (3, "borrowed")]
    three = victims_plan(tree(acme_limit="16"), grants, ask(NLP, "5"))
    assert victims(three) == [(2, "borrowed")]
