"""The policy file's rules over time (docs/twin.md, "Policies"): quota windows, idle policies and
fair share, read into the pure types the portal's own functions take (``allocations.quotas.windows.WindowSpec``,
``allocations.grants.idle_ladder.Rules``), with errors naming the entry and the key.

    start: 2026-03-02T00:00:00Z           # the moment virtual time 0 stands for (a 5-minute edge)
    windows:
      - {department: nlp, kind: recurring, begins_at: 2026-03-02T20:00:00Z, rrule: FREQ=DAILY,
         timezone: Europe/Berlin, duration_minutes: 720, limit_delta: 40}
      - {department: vision, kind: temporary, begins_at: 2026-03-10T00:00:00Z,
         ends_at: 2026-03-17T00:00:00Z, guaranteed: 20}
      - {department: speech, kind: temporary, begins_at: 2026-03-20T00:00:00Z,
         ends_at: 2026-03-21T00:00:00Z, limit: 8, shrink_policy: reclaim}   # default: wait
      - {department: nlp, priority_class: gpu-preemptible, kind: recurring, rrule: FREQ=DAILY,
         begins_at: 2026-03-02T08:00:00Z, duration_minutes: 720, limit: 4}   # one class's share
      - {department: vision, flavor: a100-half, kind: temporary, begins_at: 2026-03-10T00:00:00Z,
         ends_at: 2026-03-11T00:00:00Z, limit_delta: 8}   # on its quota of a flavor (units)
    idle_policies:
      - {name: reclaim-idle, department: nlp, priority_class: gpu-standard, threshold: 0.05,
         window_minutes: 120, grace_minutes: 60, action: reclaim}
    fair_share: {half_life_hours: 168}    # departments' ``shares`` (default 1) then order the queue
"""

from __future__ import annotations

import datetime
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Protocol

from allocations.grants.idle_ladder import Rules
from allocations.quotas.rrules import parse_rrule
from allocations.quotas.windows import WindowSpec

DEFAULT_START = datetime.datetime(2026, 3, 2, tzinfo=datetime.UTC)  # a Monday, as the generator's day 0
WINDOW_KINDS = ("temporary", "recurring")
SHRINK_POLICIES = ("wait", "reclaim")  # the portal's ``ShrinkPolicy``
IDLE_ACTIONS = ("notify", "reclaim")
HALF_LIFE_MAX_HOURS = 24 * 366
WINDOW_FIELDS = ("guaranteed", "limit", "guaranteed_delta", "limit_delta")


class Entry(Protocol):
    data: dict[str, Any]

    def fail(self, key: str, message: str) -> Any: ...
    def text(self, key: str, default: str | None = None) -> str: ...
    def integer(self, key: str, default: int | None = None, low: int = 0, high: int = 10**9) -> int: ...


@dataclass(frozen=True)
class WindowRule:
    """A quota window on a department's quota, or with ``flavor`` on its quota of that flavor: the
    portal's ``WindowSpec`` (its id: the entry's place + 1); with ``priority_class``, on that
    class's share of the quota (the spec's ``priority_class_id`` is the class's number in the
    policy, ``Policy.class_numbers``)."""

    department: str
    spec: WindowSpec
    shrink_policy: str = "wait"  # where it lowers the limit: "wait" lets what holds run; "reclaim" takes it back
    priority_class: str | None = None
    flavor: str | None = None  # on the department's quota of this flavor (``Department.flavor_quotas``)


@dataclass(frozen=True)
class IdleRule:
    """An idle policy: which grants it watches (no department or class: all) and its numbers."""

    policy_id: int
    name: str
    department: str | None
    priority_class: str | None
    threshold: float
    rules: Rules
    action: str


def moment(entry: Entry, key: str, *, required: bool = True) -> datetime.datetime | None:
    """An ISO 8601 moment with a time zone (YAML may have read it as one already)."""
    value = entry.data.get(key)
    if value is None and not required:
        return None
    if isinstance(value, datetime.datetime):
        found: datetime.datetime | None = value
    else:
        try:
            found = datetime.datetime.fromisoformat(str(value).replace("Z", "+00:00")) if isinstance(value, str) else None
        except ValueError:
            found = None
    if found is None or found.tzinfo is None:
        entry.fail(key, f"must be an ISO 8601 moment with a time zone, not {value!r}")
    assert found is not None
    return found.astimezone(datetime.UTC)


def _number(entry: Entry, key: str, *, signed: bool) -> Decimal | None:
    value = entry.data.get(key)
    if value is None:
        return None
    number = Decimal(str(value)) if isinstance(value, int | float) and not isinstance(value, bool) else None
    if number is None or not number.is_finite() or (not signed and number < 0):
        entry.fail(key, f"must be a number{'' if signed else ' at least 0'}, not {value!r}")
    return number


def window_rule(entry: Entry, index: int, departments: set[str], classes: list[str],
                flavors: Mapping[str, Collection[str]]) -> WindowRule:
    """``classes``: the policy's priority classes in its order (a class's number is its place + 1);
    ``flavors``: each department's flavors with a quota."""
    department = entry.text("department")
    if department not in departments:
        entry.fail("department", f"no department {department!r} in the policy")
    priority_class = entry.text("priority_class") if "priority_class" in entry.data else None
    if priority_class is not None and priority_class not in classes:
        entry.fail("priority_class", f"no priority class {priority_class!r} in the policy")
    flavor = entry.text("flavor") if "flavor" in entry.data else None
    if flavor is not None and flavor not in flavors.get(department, ()):
        entry.fail("flavor", f"department {department!r} has no quota of flavor {flavor!r} (its flavor_quotas)")
    shrink_policy = entry.text("shrink_policy", "wait")
    if shrink_policy not in SHRINK_POLICIES:
        entry.fail("shrink_policy", f"must be one of {', '.join(SHRINK_POLICIES)}, not {shrink_policy!r}")
    kind = entry.text("kind", "temporary")
    if kind not in WINDOW_KINDS:
        entry.fail("kind", f"must be one of {', '.join(WINDOW_KINDS)}, not {kind!r}")
    begins, ends = moment(entry, "begins_at"), moment(entry, "ends_at", required=kind == "temporary")
    assert begins is not None
    if ends is not None and ends <= begins:
        entry.fail("ends_at", "must be after begins_at")
    values = {key: _number(entry, key, signed=key.endswith("_delta")) for key in WINDOW_FIELDS}
    if not any(value is not None for value in values.values()):
        entry.fail("limit", f"a window sets at least one of {', '.join(WINDOW_FIELDS)}")
    for name in ("guaranteed", "limit"):
        if values[name] is not None and values[f"{name}_delta"] is not None:
            entry.fail(f"{name}_delta", f"give {name} or {name}_delta, not both")
    rrule, duration, zone = "", None, "UTC"
    if kind == "recurring":
        rrule, zone = entry.text("rrule"), entry.text("timezone", "UTC")
        try:
            parse_rrule(rrule, zone=zone, begins_at=begins)
        except (ValueError, KeyError) as error:
            entry.fail("rrule", f"cannot be read in time zone {zone!r}: {error}")
        duration = datetime.timedelta(minutes=entry.integer("duration_minutes", low=1, high=366 * 1440))
    spec = WindowSpec(id=index + 1, kind=kind, begins_at=begins, ends_at=ends, rrule=rrule, timezone=zone,
                      duration=duration, guaranteed=values["guaranteed"], limit=values["limit"],
                      guaranteed_delta=values["guaranteed_delta"], limit_delta=values["limit_delta"],
                      priority_class_id=classes.index(priority_class) + 1 if priority_class is not None else None)
    return WindowRule(department, spec, shrink_policy, priority_class, flavor)


def idle_rule(entry: Entry, index: int, departments: set[str], classes: set[str]) -> IdleRule:
    department = entry.data.get("department")
    if department is not None and department not in departments:
        entry.fail("department", f"no department {department!r} in the policy")
    priority_class = entry.data.get("priority_class")
    if priority_class is not None and priority_class not in classes:
        entry.fail("priority_class", f"no priority class {priority_class!r} in the policy")
    threshold = entry.data.get("threshold", 0.05)
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0.001 <= threshold <= 1:
        entry.fail("threshold", f"must be a number from 0.001 to 1, not {threshold!r}")
    action = entry.text("action", "notify")
    if action not in IDLE_ACTIONS:
        entry.fail("action", f"must be one of {', '.join(IDLE_ACTIONS)}, not {action!r}")
    rules = Rules(window_minutes=entry.integer("window_minutes", 120, low=15, high=10080),
                  grace_minutes=entry.integer("grace_minutes", 60, low=5, high=10080))
    return IdleRule(index + 1, entry.text("name"), department, priority_class, float(threshold), rules, action)


def half_life_s(entry: Entry) -> float:
    hours = entry.data.get("half_life_hours", 168)
    if isinstance(hours, bool) or not isinstance(hours, int | float) or not 0 < hours <= HALF_LIFE_MAX_HOURS:
        entry.fail("half_life_hours", f"must be a number of hours above 0, at most a year, not {hours!r}")
    return 3600.0 * float(hours)


def _iso(at: datetime.datetime) -> str:
    return at.astimezone(datetime.UTC).isoformat().replace("+00:00", "Z")


def window_write(rule: WindowRule) -> dict[str, Any]:
    spec = rule.spec
    out: dict[str, Any] = {"department": rule.department, "kind": spec.kind, "begins_at": _iso(spec.begins_at)}
    if rule.priority_class is not None:
        out["priority_class"] = rule.priority_class
    if rule.flavor is not None:
        out["flavor"] = rule.flavor
    if rule.shrink_policy != "wait":
        out["shrink_policy"] = rule.shrink_policy
    if spec.ends_at is not None:
        out["ends_at"] = _iso(spec.ends_at)
    if spec.kind == "recurring":
        assert spec.duration is not None
        out |= {"rrule": spec.rrule, "timezone": spec.timezone, "duration_minutes": int(spec.duration.total_seconds() // 60)}
    return out | {key: float(getattr(spec, key)) for key in WINDOW_FIELDS if getattr(spec, key) is not None}


def idle_write(rule: IdleRule) -> dict[str, Any]:
    out: dict[str, Any] = {"name": rule.name, "threshold": rule.threshold, "window_minutes": rule.rules.window_minutes,
                           "grace_minutes": rule.rules.grace_minutes, "action": rule.action}
    return out | {key: value for key, value in (("department", rule.department), ("priority_class", rule.priority_class))
                  if value is not None}
