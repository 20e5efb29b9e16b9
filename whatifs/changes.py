"""A what-if's proposed changes: validated, each bad value a ``FieldError`` naming its place
(``changes[0].limit``), and applied to the live policy's values (docs/twin.md, "What-if").

Four kinds, each an object of a list:

* ``quota``: a quota named by ``quota`` (its id) or by ``department`` (a slug) and ``flavor`` (a
  name, absent or null for the GPU-equivalents quota), with ``limit``, ``guarantee``,
  ``limit_delta`` and/or ``guarantee_delta`` (GPU-equivalents, or units of the flavor);
* ``priority_class``: ``name``, with ``oversubscription_factor`` (at least 1) and/or
  ``notice_minutes`` (0 to 10,080);
* ``window``: a quota window on a quota named as above, ``limit_delta`` and/or
  ``guarantee_delta``, either temporary (``begins_at``, ``ends_at``) or recurring (``rrule``,
  ``duration_minutes``, ``begins_at``), and its ``shrink_policy`` where it lowers the limit
  (``wait``, the default, or ``reclaim``); with ``priority_class`` (a name), on that class's share
  of the quota;
* ``idle_policy``: ``threshold`` (0 to 1), ``window_minutes`` (at least 5) and ``action``
  (``warn``, ``release`` or ``reclaim``), optionally for one ``department``.

The replay applies every kind: quota and priority-class changes to the policy's values, windows
and idle policies added to the live ones (``whatifs.live_rules``), a window over its period only.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation
from typing import Any

from django.utils.dateparse import parse_datetime

from allocations.models.windows import ShrinkPolicy
from allocations.quotas.rrules import parse_rrule
from kernel.errors import FieldError
from twin.policy import PriorityClass
from twin.policy_rules import IdleRule, WindowRule
from whatifs.live_rules import proposed_idle, proposed_window
from whatifs.sources import QuotaRow

KINDS = ("quota", "priority_class", "window", "idle_policy")
PROPOSED_IDS = 2**31  # a proposed window's or idle policy's id: after every live one (the newest wins ties)
QUOTA_VALUES = ("limit", "guarantee", "limit_delta", "guarantee_delta")
IDLE_ACTIONS = ("warn", "release", "reclaim")
MAX_CHANGES = 50
NOTICE_MAX = 10080
AMOUNT_MAX = Decimal(1_000_000)


@dataclass(frozen=True)
class Scope:
    """What the proposer may change: every department (platform admins) or these ones."""

    everything: bool
    departments: frozenset[str]


class _Change:
    def __init__(self, index: int, data: Any) -> None:
        self.where = f"changes[{index}]"
        if not isinstance(data, dict):
            raise FieldError(self.where, "must be an object with a kind")
        self.data = data

    def fail(self, key: str, message: str) -> FieldError:
        return FieldError(f"{self.where}.{key}", message)

    def known(self, keys: Iterable[str]) -> None:
        unknown = sorted(set(self.data) - set(keys) - {"kind"})
        if unknown:
            raise self.fail(unknown[0], "unknown key for this kind of change")

    def amount(self, key: str, *, signed: bool = False) -> Decimal | None:
        value = self.data.get(key)
        if value is None:
            return None
        try:
            number = Decimal(str(value)) if not isinstance(value, bool) else None
        except InvalidOperation:
            number = None
        low = -AMOUNT_MAX if signed else Decimal(0)
        if number is None or not number.is_finite() or not low <= number <= AMOUNT_MAX:
            raise self.fail(key, f"must be a number from {low} to {AMOUNT_MAX}, not {value!r}")
        return number

    def integer(self, key: str, *, low: int, high: int) -> int | None:
        value = self.data.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise self.fail(key, f"must be a whole number from {low} to {high}, not {value!r}")
        return int(value)

    def text(self, key: str) -> str | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip():
            raise self.fail(key, "must be a non-empty text")
        return value.strip()

    def moment(self, key: str) -> datetime.datetime | None:
        value = self.text(key)
        if value is None:
            return None
        parsed = parse_datetime(value)
        if parsed is None or parsed.tzinfo is None:
            raise self.fail(key, f"must be an ISO 8601 moment with a time zone, not {value!r}")
        return parsed


@dataclass(frozen=True)
class Proposal:
    """The validated changes, as stored (``changes``) and as the replay applies them."""

    changes: list[dict[str, Any]]
    quotas: list[QuotaRow]
    classes: list[PriorityClass]
    departments: frozenset[str]  # the departments the changes touch
    windows: list[WindowRule]  # the proposed windows, on the quotas as the twin reads them
    idle: list[IdleRule]  # the proposed idle policies


def _quota(change: _Change, quotas: list[QuotaRow]) -> QuotaRow:
    if "quota" in change.data:
        quota_id = change.integer("quota", low=1, high=2**31 - 1)
        found = next((row for row in quotas if row.id == quota_id), None)
        if found is None:
            raise change.fail("quota", f"no quota {quota_id}")
        return found
    department = change.text("department")
    if department is None:
        raise change.fail("department", "required (or a quota id)")
    flavor = change.text("flavor")
    found = next((row for row in quotas if row.department == department and row.flavor == flavor), None)
    if found is None:
        what = f"for flavor {flavor!r}" if flavor else "in GPU-equivalents"
        raise change.fail("flavor" if flavor else "department", f"department {department!r} has no quota {what}")
    return found


def _quota_values(change: _Change, row: QuotaRow) -> QuotaRow:
    values = {key: change.amount(key, signed=key.endswith("_delta")) for key in QUOTA_VALUES}
    if all(value is None for value in values.values()):
        raise change.fail("limit", f"give at least one of {', '.join(QUOTA_VALUES)}")
    guarantee = values["guarantee"] if values["guarantee"] is not None else row.guarantee
    limit = values["limit"] if values["limit"] is not None else row.limit
    guarantee += values["guarantee_delta"] or 0
    limit += values["limit_delta"] or 0
    if guarantee < 0:
        raise change.fail("guarantee_delta" if values["guarantee_delta"] else "guarantee", f"leaves a guarantee below 0 ({guarantee})")
    if limit < guarantee:
        key = "limit_delta" if values["limit_delta"] is not None else "limit"
        raise change.fail(key, f"leaves the limit ({limit}) below the guarantee ({guarantee})")
    return replace(row, guarantee=guarantee, limit=limit)


def _class(change: _Change, classes: list[PriorityClass]) -> PriorityClass:
    name = change.text("name")
    found = next((c for c in classes if c.name == name), None)
    if found is None:
        raise change.fail("name", f"no priority class {name!r}" if name else "required")
    factor = change.amount("oversubscription_factor")
    if factor is not None and factor < 1:
        raise change.fail("oversubscription_factor", f"must be at least 1, not {factor}")
    notice = change.integer("notice_minutes", low=0, high=NOTICE_MAX)
    if factor is None and notice is None:
        raise change.fail("oversubscription_factor", "give oversubscription_factor and/or notice_minutes")
    notice_s = found.notice_s if notice is None or found.notice_s == 0 else 60.0 * notice
    return replace(found, factor=found.factor if factor is None else factor, notice_s=notice_s)


def _window(change: _Change, quotas: list[QuotaRow], classes: list[PriorityClass],
            window_id: int) -> tuple[QuotaRow, list[WindowRule]]:
    change.known(("quota", "department", "flavor", "priority_class", "begins_at", "ends_at", "rrule", "timezone",
                  "duration_minutes", "limit_delta", "guarantee_delta", "shrink_policy"))
    row = _quota(change, quotas)
    share = change.text("priority_class")
    names = [c.name for c in classes]
    if share is not None and share not in names:
        raise change.fail("priority_class", f"no priority class {share!r}")
    shrink = change.data.get("shrink_policy")
    if shrink is not None and shrink not in ShrinkPolicy.values:
        raise change.fail("shrink_policy", f"must be one of {', '.join(ShrinkPolicy.values)}, not {shrink!r}")
    if change.amount("limit_delta", signed=True) is None and change.amount("guarantee_delta", signed=True) is None:
        raise change.fail("limit_delta", "give limit_delta and/or guarantee_delta")
    begins = change.moment("begins_at")
    if begins is None:
        raise change.fail("begins_at", "required")
    ends = change.moment("ends_at")
    rrule = change.text("rrule")
    if rrule is not None:
        if change.integer("duration_minutes", low=1, high=NOTICE_MAX) is None:
            raise change.fail("duration_minutes", "required for a recurring window")
        zone = change.text("timezone") or "UTC"
        try:
            parse_rrule(rrule, zone=zone, begins_at=begins)
        except (ValueError, KeyError) as error:
            raise change.fail("rrule", f"cannot be read in time zone {zone!r}: {error}") from None
    elif ends is None or ends <= begins:
        raise change.fail("ends_at", "required, after begins_at (or give rrule and duration_minutes)")
    if ends is not None and ends <= begins:
        raise change.fail("ends_at", "must be after begins_at")
    return row, proposed_window(change.data, row=row, quotas=quotas, window_id=window_id, period=(begins, ends),
                                class_number=names.index(share) + 1 if share is not None else None)


def _idle(change: _Change, departments: frozenset[str] | None) -> str | None:
    change.known(("department", "threshold", "window_minutes", "action"))
    department = change.text("department")
    if department is not None and departments is not None and department not in departments:
        raise change.fail("department", f"no department {department!r}")
    threshold = change.amount("threshold")
    if threshold is None or threshold > 1:
        raise change.fail("threshold", "required, a fraction from 0 to 1")
    if change.integer("window_minutes", low=5, high=NOTICE_MAX) is None:
        raise change.fail("window_minutes", "required, from 5 to 10080")
    if change.text("action") not in IDLE_ACTIONS:
        raise change.fail("action", f"must be one of {', '.join(IDLE_ACTIONS)}")
    return department


def _check_scope(change: _Change, scope: Scope, department: str | None, *, key: str) -> None:
    if scope.everything:
        return
    if department is None or department not in scope.departments:
        raise change.fail(key, "outside the departments you administer" if department else "only platform admins may change this")


def proposal_validate(*, changes: Any, quotas: list[QuotaRow], classes: list[PriorityClass], scope: Scope,
                      departments: frozenset[str] | None = None) -> Proposal:
    """The changes checked and applied to ``quotas`` and ``classes`` (copies); ``departments``: the
    names an idle policy may name (None: any)."""
    if not isinstance(changes, list) or not changes:
        raise FieldError("changes", "required, a non-empty list of changes")
    if len(changes) > MAX_CHANGES:
        raise FieldError("changes", f"at most {MAX_CHANGES} changes")
    quotas, classes = list(quotas), list(classes)
    touched: set[str] = set()
    windows: list[WindowRule] = []
    idle: list[IdleRule] = []
    for index, data in enumerate(changes):
        change = _Change(index, data)
        kind = change.data.get("kind")
        if kind not in KINDS:
            raise change.fail("kind", f"must be one of {', '.join(KINDS)}, not {kind!r}")
        if kind == "quota":
            change.known(("quota", "department", "flavor", *QUOTA_VALUES))
            row = _quota(change, quotas)
            _check_scope(change, scope, row.department, key="quota" if "quota" in change.data else "department")
            quotas[quotas.index(row)] = _quota_values(change, row)
            touched.add(row.department)
        elif kind == "priority_class":
            change.known(("name", "oversubscription_factor", "notice_minutes"))
            _check_scope(change, scope, None, key="name")
            updated = _class(change, classes)
            classes = [updated if c.name == updated.name else c for c in classes]
        elif kind == "window":
            row, rules = _window(change, quotas, classes, PROPOSED_IDS + index)
            _check_scope(change, scope, row.department, key="quota" if "quota" in change.data else "department")
            touched.add(row.department)
            windows += rules
        else:
            department = _idle(change, departments)
            _check_scope(change, scope, department, key="department")
            touched.update({department} if department else set())
            idle.append(proposed_idle(change.data, PROPOSED_IDS + index))
    return Proposal(changes, quotas, classes, frozenset(touched), windows, idle)


def _signed(value: Any) -> str:
    text = str(value)
    return text if text.startswith("-") else "+" + text


def _quota_words(change: dict[str, Any], names: Mapping[int, str]) -> str:
    if change.get("quota") is not None:
        where = names.get(change["quota"], f"quota #{change['quota']}")
    else:
        where = f"{change.get('department', '?')} · {change.get('flavor') or 'GPU-equivalents'}"
    parts = [f"{name} {change[name]}" for name in ("limit", "guarantee") if change.get(name) is not None]
    parts += [f"{name} {_signed(change[name + '_delta'])}" for name in ("limit", "guarantee")
              if change.get(name + "_delta") is not None]
    return f"{where}: {', '.join(parts)}"


def change_words(change: dict[str, Any], *, quota_names: Mapping[int, str]) -> str:
    """One proposed change in words, as the what-if's page lists it (the stored, validated form);
    ``quota_names`` names the quotas a change names by id ("nlp · GPU-equivalents")."""
    kind = change.get("kind")
    if kind == "quota":
        return "Quota " + _quota_words(change, quota_names)
    if kind == "priority_class":
        parts = []
        if change.get("oversubscription_factor") is not None:
            parts.append(f"oversubscription ×{change['oversubscription_factor']}")
        if change.get("notice_minutes") is not None:
            parts.append(f"notice {change['notice_minutes']} min")
        return f"Priority class {change.get('name', '?')}: {', '.join(parts)}"
    if kind == "window":
        when = (f"{change['rrule']} for {change.get('duration_minutes')} min" if change.get("rrule")
                else f"from {change.get('begins_at')} to {change.get('ends_at')}")
        shrink = ", reclaiming beyond a lower limit" if change.get("shrink_policy") == ShrinkPolicy.RECLAIM else ""
        share = f" ({change['priority_class']}'s share)" if change.get("priority_class") else ""
        return f"Window on {_quota_words(change, quota_names)}{share}, {when}{shrink}"
    if kind == "idle_policy":
        scope = change.get("department") or "every department"
        return (f"Idle policy for {scope}: busy below {change.get('threshold')} for {change.get('window_minutes')} min"
                f" → {change.get('action')}")
    return str(change)
