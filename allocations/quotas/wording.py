"""How the quota checks of a request read, for people: in a refusal's message and in the
numbers it carries (``details``), naming the quota window that set a limit (``limit_by``).

Every quota refusal's sentence is composed here: admission's (``QuotaWords.refusal``), a change's
(``change_exceeded_words``), a project cap's (``project_cap_exceeded_words``) and a department
without any quota for the flavor (``no_quota_words``); they share one shape (``_Exceeded``).
A refusal composed anywhere else fails ``tests/architecture/test_one_rule.py``."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from decimal import Decimal

from allocations.models import Flavor
from allocations.quotas import algebra
from allocations.quotas.effective_tree import binding_checks, unstepped
from kernel.errors import QuotaExceeded
from kernel.numbers import plain
from kernel.times import span_utc


def quota_scope_name(flavor: Flavor | None) -> str:
    """What a quota counts, in a label: its flavor's name, or ``GPU-equivalents`` (no flavor)."""
    return flavor.name if flavor is not None else "GPU-equivalents"


def counted_words(flavor: str | None, priority_class: str | None = None) -> str:
    """``a100 units`` (a flavor's name), ``GPU-equivalents`` (None), or, for a priority class's share,
    ``gpu-preemptible's share of a100 units``."""
    what = f"{flavor} units" if flavor is not None else "GPU-equivalents"
    return f"{priority_class}'s share of {what}" if priority_class is not None else what


def scope_words(scope: algebra.Scope, *, flavor: str, priority_class: str) -> str:
    """What ``scope`` counts, in words (``counted_words``; a step of time reads as the scope it
    counts)."""
    if isinstance(scope, tuple):
        inner = scope_words(scope[2], flavor=flavor, priority_class=priority_class)
        return f"{priority_class}'s share of {inner}" if scope[0] == "class" else inner
    return counted_words(flavor if scope is not None else None)


@dataclass(frozen=True)
class _Exceeded:
    """``<cap> exceeded for <what> in <where>: requested <n>, <held> <n>, <limit> <n><then>``."""

    cap: str
    what: str
    where: str
    requested: Decimal
    holds: Decimal
    value: Decimal
    held: str = "held"
    limit: str = "limit"
    then: str = ""

    def __str__(self) -> str:
        return (f"{self.cap} exceeded for {self.what} in {self.where}: requested {plain(self.requested)}, "
                f"{self.held} {plain(self.holds)}, {self.limit} {plain(self.value)}{self.then}")


def no_quota_words(*, department: str, flavor: str) -> str:
    """A department with no quota of its own or above it for the flavor, nor for GPU-equivalents."""
    return f"Department {department} has no quota for {flavor} or for GPU-equivalents."


def change_exceeded_words(*, check: algebra.Check, what: str, department: str, starts_at: datetime.datetime,
                          ends_at: datetime.datetime) -> str:
    """A renewal's or a resize's refusal: a change reclaims nothing."""
    return str(_Exceeded(cap="Quota", what=what, where=f"department {department} from {span_utc(starts_at, ends_at)}",
                         requested=check.requested, held="held by other grants", holds=check.holds,
                         value=check.effective_limit, then=". A change reclaims nothing."))


def project_cap_exceeded_words(*, what: str, project: str, span: tuple[datetime.datetime, datetime.datetime],
                               requested: Decimal, holds: Decimal, cap: Decimal) -> str:
    """A project cap's refusal over ``span`` (docs/quotas.md, "Project caps")."""
    return str(_Exceeded(cap="Project cap", what=what, where=f"project {project} from {span_utc(*span)}",
                         requested=requested, held="held by the project's other grants", holds=holds,
                         limit="project cap", value=cap, then=". The department's admins set project caps."))


@dataclass(frozen=True)
class QuotaWords:
    """How the checks of one request read: the department names, its flavor and class, which
    quota window set each limit and, step by step, when."""

    tree: algebra.Tree
    names: dict[int, str]
    flavor: Flavor
    priority_class: str

    def lines(self, checks: list[algebra.Check]) -> list[dict[str, str | int | None]]:
        """One line per quota over the request's whole interval, with the numbers of its binding
        step (``binding_checks``), and when that step is (``binding_from``, ``binding_until``)."""
        out = []
        for check in binding_checks(checks):
            line = self.details(check)
            if "from" in line:
                line["binding_from"], line["binding_until"] = line.pop("from"), line.pop("until")
            out.append(line)
        return out

    def worst_failing(self, checks: list[algebra.Check]) -> algebra.Check:
        """The binding step of the first quota that fails (the one a refusal names)."""
        return next(check for check in binding_checks(checks) if not check.fits)

    def details(self, check: algebra.Check) -> dict[str, str | int | None]:
        scope, step = unstepped(check.scope)
        real = scope[2] if isinstance(scope, tuple) else scope
        out: dict[str, str | int | None] = {
            "department": self.names.get(check.department_id, str(check.department_id)),
            "flavor": self.flavor.name if real is not None else None,
            "requested": plain(check.requested),
            "in_use": plain(check.holds),
            "limit": plain(check.limit),
            "effective_limit": plain(check.effective_limit),
        }
        if isinstance(scope, tuple):
            out["priority_class"] = self.priority_class
        found = self.tree.limits.get((check.department_id, check.scope))
        if found is not None and found.limit_by is not None:
            out["limit_by"] = found.limit_by  # the quota window whose value this limit is
        steps = getattr(self.tree, "steps", ())
        if step is not None and step < len(steps):
            out["from"], out["until"] = steps[step][0].isoformat(), steps[step][1].isoformat()
        return out

    def refusal(self, check: algebra.Check) -> QuotaExceeded:
        details = self.details(check)
        what = scope_words(check.scope, flavor=self.flavor.name, priority_class=self.priority_class)
        when = ""  # the details keep the step's bounds in ISO, for programs; the sentence is for people
        if "from" in details:
            bounds = (datetime.datetime.fromisoformat(str(details[key])) for key in ("from", "until"))
            when = f" from {span_utc(*bounds)}"
        by = f" (set by quota window #{details['limit_by']})" if "limit_by" in details else ""
        return QuotaExceeded(
            str(_Exceeded(cap="Quota", what=what, where=f"department {details['department']}",
                          requested=check.requested, holds=check.holds, value=check.effective_limit,
                          then=f"{by}{when}; nothing it may reclaim frees enough.")),
            details=details,
        )
