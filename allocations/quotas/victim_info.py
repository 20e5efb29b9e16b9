"""The victims of a plan as people read them: whose grant, how many of its units go, and the facts
that made it a victim (``allocations.quotas.victims``), worded from those facts and nothing else,
so that every stated reason is true of the grants when the plan was made."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from allocations.quotas import algebra
from allocations.quotas.wording import scope_words
from kernel.numbers import plain
from tenants.models import Department


@dataclass(frozen=True)
class VictimInfo:
    """A grant the request would take (all of it, or ``units`` of its ``quantity``), as people read it."""

    allocation_id: int
    project: str
    department: str
    flavor: str
    quantity: int
    priority_class: str
    state: str
    why: str  # borrowed, oversubscribed, lower-priority
    notice_minutes: int
    units: int | None = None  # how many of its units go; None: all of them
    facts: str = ""  # why, in words, from the facts that made it a victim

    @property
    def gives_back(self) -> int:
        return self.quantity if self.units is None else self.units

    @property
    def partial(self) -> bool:
        return self.gives_back < self.quantity

    def as_details(self) -> dict[str, Any]:
        return {
            "allocation": self.allocation_id, "project": self.project, "department": self.department,
            "flavor": self.flavor, "quantity": self.quantity, "priority_class": self.priority_class,
            "state": self.state, "why": self.why, "notice_minutes": self.notice_minutes, "units": self.gives_back,
            "facts": self.facts,
        }


def fact_words(
    fact: algebra.Fact, *, row: Mapping[str, Any], names: Mapping[int, str], tree: algebra.Tree | None = None
) -> str:
    """The fact as a sentence about the grant ``row`` (its ``GRANT_FIELDS``)."""
    where = names.get(fact.department_id, str(fact.department_id))
    if fact.basis == "priority":
        return (f"a request of priority {plain(fact.line)} in department {where} needed the capacity, and its "
                f"priority class {row['priority_class__name']} has the lower priority {plain(fact.held)}")
    what = scope_words(fact.scope, flavor=row["flavor__name"], priority_class=row["priority_class__name"])
    if fact.basis == "own-projects":
        return (f"it is held by department {where}'s own projects ({plain(fact.held)} {what}), which no team's "
                "guarantee covers, while the request's team stays within its guarantee")
    if fact.basis == "surplus":
        return (f"it ran on the one node where the request's units fit, and department {where} held "
                f"{plain(fact.held)} {what} against a guarantee of {plain(fact.line)}: beyond it by at least what "
                "it gives back there")
    if fact.basis == "guarantee":
        return (f"it borrowed beyond the guarantee of department {where}, which held {plain(fact.held)} {what} "
                f"against a guarantee of {plain(fact.line)}")
    words = f"it lay beyond the limit of department {where}, which held {plain(fact.held)} {what} against a limit of " \
            f"{plain(fact.line)}"
    limit = tree.limits.get((fact.department_id, fact.scope)) if tree is not None else None
    if limit is not None and limit.limit_by is not None:
        words += f" (set by quota window #{limit.limit_by})"
    factor = Decimal(row.get("priority_class__oversubscription_factor") or 1)
    if factor > 1:
        words += (f", held there through its priority class's oversubscription ({row['priority_class__name']} may "
                  f"hold {plain(factor)} times a limit)")
    return words


def victim_infos(
    victims: Iterable[algebra.Victim], info: dict[int, dict[str, Any]], *, tree: algebra.Tree | None = None
) -> list[VictimInfo]:
    """The victims as people read them, from their rows (``overlapping_grants``, ``grants_at``)."""
    victims = list(victims)
    wanted = {victim.fact.department_id for victim in victims if victim.fact is not None}
    names = dict(Department.objects.filter(pk__in=wanted).values_list("pk", "slug")) if wanted else {}
    out = []
    for victim in victims:
        row = info[victim.allocation_id]
        out.append(VictimInfo(
            allocation_id=victim.allocation_id, project=row["project__slug"], department=row["project__department__slug"],
            flavor=row["flavor__name"], quantity=row["quantity"], priority_class=row["priority_class__name"],
            state=row["state"], why=victim.why,
            notice_minutes=0 if row["priority_class__preemptible"] else int(row["priority_class__notice_minutes"]),
            units=min(victim.units, row["quantity"]),
            facts=fact_words(victim.fact, row=row, names=names, tree=tree) if victim.fact is not None else "",
        ))  # fmt: skip
    return out
