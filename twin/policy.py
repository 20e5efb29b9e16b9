"""The policy file (YAML): departments with their quotas, priority classes and a catalogue of
flavors (docs/twin.md, "Policies"). Quotas are in GPU-equivalents (a whole GPU is 1, a share of
500 thousandths is 0.5), as the portal's ``None`` scope counts them.

    departments:
      - {name: acme, guarantee: 200, limit: 600}
      - {name: nlp, guarantee: 120, limit: 400, parent: acme}   # acme's quota binds nlp's too
      - {name: vision, guarantee: 40, limit: 80, flavor_quotas: {a100-half: {guarantee: 8, limit: 16}}}  # units
    priority_classes:
      - {name: gpu-standard, value: 10000, preemption: PreemptLowerPriority, oversubscription_factor: 1,
         notice_minutes: 15, preemptible: false}
    flavors:
      - {name: a100-half, num_gpu: 1, gpu_milli: 500, gpu_model: A100}
      - {name: a100-mig-3g, mig_profile: 3g.40gb, gpu_model: A100-80GB}   # a MIG instance
      - {name: a100-mig-1g, mig_profile: 1g.10gb, gpu_model: A100-80GB, gpu_equivalents: 0.2}   # weighed as stored
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, NoReturn

import yaml

from allocations.quotas.windows import WindowSpec
from twin.errors import TwinInputError
from twin.mig import MigAskError
from twin.policy_rules import (
    DEFAULT_START,
    IdleRule,
    WindowRule,
    half_life_s,
    idle_rule,
    idle_write,
    moment,
    window_rule,
    window_write,
)
from twin.workload import GPU_MILLI, Job, Shape, mig_shape

PREEMPTION = ("PreemptLowerPriority", "Never")
SECTIONS = ("start", "departments", "priority_classes", "flavors", "windows", "idle_policies", "fair_share")


@dataclass(frozen=True)
class FlavorQuota:
    """A department's quota of one flavor of the catalogue, in units of the flavor (the portal's
    quota of a flavor: its scope counts units, beside the GPU-equivalents the department's counts)."""

    flavor: str
    guarantee: Decimal
    limit: Decimal


@dataclass(frozen=True)
class Department:
    name: str
    guarantee: Decimal
    limit: Decimal
    shares: int = 1  # its fair-share shares (the portal's ``FairShare.shares``)
    parent: str | None = None  # the department above it, whose quota binds it too (the portal's tree)
    flavor_quotas: tuple[FlavorQuota, ...] = ()  # its flavors' quotas, checked besides its own


@dataclass(frozen=True)
class PriorityClass:
    name: str
    value: int
    preempts_lower: bool = False
    factor: Decimal = Decimal(1)
    notice_s: float = 900.0  # 0 when preemptible, as the portal's ``PriorityClass.notice``


@dataclass(frozen=True)
class Policy:
    departments: tuple[Department, ...]
    classes: Mapping[str, PriorityClass]
    flavors: Mapping[str, Shape] = field(default_factory=dict)
    start: datetime.datetime = DEFAULT_START  # the moment virtual time 0 stands for
    windows: tuple[WindowRule, ...] = ()
    idle_policies: tuple[IdleRule, ...] = ()
    fair_share_half_life_s: float | None = None  # None: no fair-share ordering

    def department(self, name: str) -> Department:
        return next(d for d in self.departments if d.name == name)

    @property
    def flavor_numbers(self) -> dict[str, int]:
        """Each flavor's number, from 1 in the catalogue's order: how the replay names a flavor's
        quota scope (the portal's flavor id)."""
        return {name: k for k, name in enumerate(self.flavors, start=1)}

    @property
    def class_numbers(self) -> dict[str, int]:
        """Each priority class's number, from 1 in the policy's order: how the replay names a class
        in a quota scope of its share (``algebra.class_scope``) and in an idle policy's scope."""
        return {name: k for k, name in enumerate(self.classes, start=1)}

    def window_spec(self, rule: WindowRule) -> WindowSpec:
        """``rule``'s window as the replay weighs it: on its class's share by the class's number
        (whatever number the source gave it), else on the department's quota."""
        number = self.class_numbers[rule.priority_class] if rule.priority_class is not None else None
        return rule.spec if rule.spec.priority_class_id == number else replace(rule.spec, priority_class_id=number)

    @property
    def guaranteed(self) -> Decimal:
        """What the guarantees promise in all: each top department's guarantee, or its children's
        together where they promise more (a child's guarantee lies within its parent's)."""
        def promised(name: str | None) -> Decimal:
            children = sum((promised(d.name) for d in self.departments if d.parent == name), Decimal(0))
            return children if name is None else max(self.department(name).guarantee, children)

        return promised(None)

    @property
    def reclaim_notice_s(self) -> float:
        """The longest notice a reclaimed grant gets: a request within its guarantee that waits
        longer than this waited for more than a reclaim (a guarantee violation)."""
        return max((c.notice_s for c in self.classes.values()), default=0.0)

    def check_jobs(self, jobs: list[Job], source: str = "workload") -> None:
        """Every request names a known department and priority class (else an error naming its line)."""
        names = {d.name for d in self.departments}
        for job in jobs:
            if job.department not in names:
                raise TwinInputError(source, job.line, "department", f"no department {job.department!r} in the policy")
            if job.priority_class not in self.classes:
                raise TwinInputError(source, job.line, "priority_class",
                                     f"no priority class {job.priority_class!r} in the policy")


class _Entry:
    def __init__(self, source: str, where: str, data: Any) -> None:
        if not isinstance(data, dict):
            raise TwinInputError(source, where, "(entry)", "must be a mapping")
        self.source, self.where, self.data = source, where, data

    def fail(self, key: str, message: str) -> NoReturn:
        raise TwinInputError(self.source, self.where, key, message)

    def text(self, key: str, default: str | None = None) -> str:
        value = self.data.get(key, default)
        if not isinstance(value, str) or not value.strip():
            self.fail(key, "required, a non-empty text")
        return str(value).strip()

    def decimal(self, key: str, default: Decimal | None = None, low: Decimal = Decimal(0)) -> Decimal:
        value = self.data.get(key)
        if value is None and default is not None:
            return default
        try:
            number = Decimal(str(value)) if not isinstance(value, bool) and value is not None else None
        except InvalidOperation:
            number = None
        if number is None or not number.is_finite() or number < low:
            self.fail(key, f"must be a number at least {low}, not {value!r}")
        return number

    def integer(self, key: str, default: int | None = None, low: int = 0, high: int = 10**9) -> int:
        value = self.data.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            self.fail(key, f"must be a whole number from {low} to {high}, not {value!r}")
        return int(value)


def _department(entry: _Entry) -> Department:
    guarantee = entry.decimal("guarantee")
    limit = entry.decimal("limit", default=guarantee)
    if limit < guarantee:
        entry.fail("limit", f"must be at least the guarantee ({guarantee}), not {limit}")
    parent = entry.text("parent") if entry.data.get("parent") is not None else None
    return Department(entry.text("name"), guarantee, limit, entry.integer("shares", 1, low=1, high=10_000), parent,
                      _flavor_quotas(entry))


def _flavor_quotas(entry: _Entry) -> tuple[FlavorQuota, ...]:
    """``flavor_quotas: {a100: {guarantee: 4, limit: 8}}``: units of each flavor (its name checked
    against the catalogue once it is read, ``_check_flavor_quotas``)."""
    data = entry.data.get("flavor_quotas")
    if data is None:
        return ()
    if not isinstance(data, dict):
        entry.fail("flavor_quotas", "must be a mapping of flavor names to {guarantee, limit}")
    found = []
    for name, values in data.items():
        inner = _Entry(entry.source, entry.where, values) if isinstance(values, dict) else None
        if inner is None:
            entry.fail(f"flavor_quotas.{name}", "must be a mapping with guarantee and limit")
        assert inner is not None
        try:
            guarantee = inner.decimal("guarantee")
            limit = inner.decimal("limit", default=guarantee)
        except TwinInputError as error:
            entry.fail(f"flavor_quotas.{name}.{error.field}", error.message)
        if limit < guarantee:
            entry.fail(f"flavor_quotas.{name}.limit", f"must be at least the guarantee ({guarantee}), not {limit}")
        found.append(FlavorQuota(str(name), guarantee, limit))
    return tuple(found)


def _check_flavor_quotas(source: str, departments: list[Department], flavors: set[str]) -> None:
    for index, department in enumerate(departments):
        for quota in department.flavor_quotas:
            if quota.flavor not in flavors:
                raise TwinInputError(source, f"departments[{index}]", f"flavor_quotas.{quota.flavor}",
                                     "no such flavor in the policy's flavors")


def _check_parents(source: str, departments: list[Department]) -> None:
    """Every ``parent`` names another department of the policy, and no chain comes back to itself."""
    parents = {d.name: d.parent for d in departments}
    for index, department in enumerate(departments):
        where = f"departments[{index}]"
        if department.parent is not None and department.parent not in parents:
            raise TwinInputError(source, where, "parent", f"no department {department.parent!r} in the policy")
        seen, current = [department.name], department.parent
        while current is not None:
            if current in seen:
                raise TwinInputError(source, where, "parent",
                                     f"a cycle: {' → '.join([*seen, current])}")
            seen.append(current)
            current = parents[current]


def _priority_class(entry: _Entry) -> PriorityClass:
    preemption = entry.text("preemption", "PreemptLowerPriority")
    if preemption not in PREEMPTION:
        entry.fail("preemption", f"must be one of {', '.join(PREEMPTION)}, not {preemption!r}")
    preemptible = entry.data.get("preemptible", False)
    if not isinstance(preemptible, bool):
        entry.fail("preemptible", "must be true or false")
    notice = entry.integer("notice_minutes", 15, high=10080)
    return PriorityClass(entry.text("name"), entry.integer("value", low=-2147483648, high=1_000_000_000),
                         preemption == "PreemptLowerPriority", entry.decimal("oversubscription_factor", Decimal(1), Decimal(1)),
                         0.0 if preemptible else 60.0 * notice)


def _flavor(entry: _Entry) -> tuple[str, Shape]:
    if "mig_profile" in entry.data:
        return entry.text("name"), _mig_flavor(entry)
    count = entry.integer("num_gpu", 1, low=1, high=64)
    milli = entry.integer("gpu_milli", GPU_MILLI, low=1, high=GPU_MILLI)
    if count > 1 and milli != GPU_MILLI:
        entry.fail("gpu_milli", "a share below a whole GPU is only possible with num_gpu 1")
    model = entry.data.get("gpu_model")
    models = frozenset(m.strip() for m in str(model).split("|") if m.strip()) if model else frozenset()
    return entry.text("name"), Shape(count, milli, models)


def _mig_flavor(entry: _Entry) -> Shape:
    """A MIG instance's flavor: one instance of ``mig_profile`` on one GPU of ``gpu_model``."""
    for key in ("num_gpu", "gpu_milli"):
        if key in entry.data:
            entry.fail(key, "a MIG flavor (mig_profile) is one instance on one GPU: no num_gpu or gpu_milli")
    model = entry.data.get("gpu_model")
    models = frozenset(m.strip() for m in str(model).split("|") if m.strip()) if model else frozenset()
    try:
        shape = mig_shape(entry.text("mig_profile"), models)
    except MigAskError as problem:
        entry.fail(problem.field, str(problem))
    if "gpu_equivalents" not in entry.data:
        return shape
    weight = entry.decimal("gpu_equivalents", low=Decimal("0.0001"))
    if weight > 1:
        entry.fail("gpu_equivalents", f"one instance weighs at most one GPU, not {weight}")
    return replace(shape, gpu_milli=int((weight * GPU_MILLI).to_integral_value()), mig_weight=weight)


def _flavor_write(name: str, shape: Shape) -> dict[str, Any]:
    if shape.mig_profile is not None:
        return {"name": name, "mig_profile": shape.mig_profile, "gpu_equivalents": str(shape.mig_weight),
                **({"gpu_model": "|".join(sorted(shape.models))} if shape.models else {})}
    return {"name": name, "num_gpu": shape.num_gpu, "gpu_milli": shape.gpu_milli,
            **({"gpu_model": "|".join(sorted(shape.models))} if shape.models else {})}


def _section(source: str, data: dict[str, Any], key: str, *, required: bool) -> list[_Entry]:
    items = data.get(key, [] if not required else None)
    if not isinstance(items, list) or (required and not items):
        raise TwinInputError(source, key, "(section)", "required, a non-empty list" if required else "must be a list")
    return [_Entry(source, f"{key}[{index}]", item) for index, item in enumerate(items)]


def _unique(source: str, key: str, names: list[str]) -> None:
    for index, name in enumerate(names):
        if name in names[:index]:
            raise TwinInputError(source, f"{key}[{index}]", "name", f"{name!r} is given twice")


def policy_read(text: str, *, source: str = "policy") -> Policy:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        raise TwinInputError(source, mark.line + 1 if mark else 0, "(yaml)", str(error).splitlines()[0]) from None
    if not isinstance(data, dict):
        raise TwinInputError(source, 1, "(document)", "must be a mapping with departments and priority_classes")
    unknown = sorted(set(data) - set(SECTIONS))
    if unknown:
        raise TwinInputError(source, unknown[0], "(section)", "unknown section")
    departments = [_department(entry) for entry in _section(source, data, "departments", required=True)]
    classes = [_priority_class(entry) for entry in _section(source, data, "priority_classes", required=True)]
    flavors = [_flavor(entry) for entry in _section(source, data, "flavors", required=False)]
    _unique(source, "departments", [d.name for d in departments])
    _check_parents(source, departments)
    _unique(source, "priority_classes", [c.name for c in classes])
    _unique(source, "flavors", [name for name, _ in flavors])
    _check_flavor_quotas(source, departments, {name for name, _ in flavors})
    names, class_names = {d.name for d in departments}, {c.name for c in classes}
    quotas_of = {d.name: {q.flavor for q in d.flavor_quotas} for d in departments}
    windows = [window_rule(entry, k, names, [c.name for c in classes], quotas_of)
               for k, entry in enumerate(_section(source, data, "windows", required=False))]
    idle = [idle_rule(entry, k, names, class_names)
            for k, entry in enumerate(_section(source, data, "idle_policies", required=False))]
    _unique(source, "idle_policies", [rule.name for rule in idle])
    top = _Entry(source, "(document)", data)
    start = moment(top, "start", required=False) or DEFAULT_START
    if start.timestamp() % 300:
        top.fail("start", "must fall on a 5-minute edge (the idle ladder's buckets)")
    fair = _Entry(source, "fair_share", data["fair_share"]) if "fair_share" in data else None
    return Policy(tuple(departments), {c.name: c for c in classes}, dict(flavors), start, tuple(windows), tuple(idle),
                  half_life_s(fair) if fair is not None else None)


def policy_load(path: Path) -> Policy:
    return policy_read(path.read_text(), source=path.name)


def policy_write(policy: Policy) -> str:
    """The policy as YAML that :func:`policy_read` reads back."""
    data: dict[str, Any] = {
        "start": policy.start.isoformat().replace("+00:00", "Z"),
        "departments": [{"name": d.name, "guarantee": float(d.guarantee), "limit": float(d.limit), "shares": d.shares,
                         **({"parent": d.parent} if d.parent is not None else {}),
                         **({"flavor_quotas": {q.flavor: {"guarantee": float(q.guarantee), "limit": float(q.limit)}
                                               for q in d.flavor_quotas}} if d.flavor_quotas else {})}
                        for d in policy.departments],
        "priority_classes": [
            {"name": c.name, "value": c.value, "preemption": PREEMPTION[0] if c.preempts_lower else PREEMPTION[1],
             "oversubscription_factor": float(c.factor), "notice_minutes": int(c.notice_s // 60),
             "preemptible": c.notice_s == 0}
            for c in policy.classes.values()
        ],
        "flavors": [_flavor_write(name, shape) for name, shape in policy.flavors.items()],
        "windows": [window_write(rule) for rule in policy.windows],
        "idle_policies": [idle_write(rule) for rule in policy.idle_policies],
    }
    if policy.fair_share_half_life_s is not None:
        data["fair_share"] = {"half_life_hours": policy.fair_share_half_life_s / 3600}
    return yaml.safe_dump(data, sort_keys=False)


RULE_SECTIONS = ("start", "windows", "idle_policies", "fair_share")


def policy_with_rules(policy: Policy, text: str, *, source: str = "rules") -> Policy:
    """``policy`` with the rules over time of a YAML file that has only those sections (``start``,
    ``windows``, ``idle_policies``, ``fair_share``): to replay a generated or traced month's own
    departments under proposed windows, idle policies or fair share."""
    try:
        extra = yaml.safe_load(text) or {}
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        raise TwinInputError(source, mark.line + 1 if mark else 0, "(yaml)", str(error).splitlines()[0]) from None
    if not isinstance(extra, dict):
        raise TwinInputError(source, 1, "(document)", f"must be a mapping with some of {', '.join(RULE_SECTIONS)}")
    unknown = sorted(set(extra) - set(RULE_SECTIONS))
    if unknown:
        raise TwinInputError(source, unknown[0], "(section)", f"only {', '.join(RULE_SECTIONS)} may be given here")
    data = yaml.safe_load(policy_write(policy)) | extra
    return policy_read(yaml.safe_dump(data, sort_keys=False), source=source)
