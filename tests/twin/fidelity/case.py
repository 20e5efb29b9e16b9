"""The workload the fidelity test replays both ways: seeded, small enough for the suite, busy enough
that requests wait, borrow and are reclaimed. One GPU model; flavors of a whole GPU and of shares
(a half, a quarter); three departments whose guarantees add up to the cluster (in the nested case
two teams under one of them besides); priority classes that preempt with notice, and one
preemptible without notice; some requests ask a later start."""

from __future__ import annotations

import datetime
import random
from collections.abc import Mapping
from dataclasses import dataclass, replace
from decimal import Decimal

from allocations.grants.idle_ladder import Rules
from allocations.quotas.windows import WindowSpec
from placement import Gpu, Node
from twin.policy import Department, FlavorQuota, Policy, PriorityClass
from twin.policy_rules import IdleRule, WindowRule
from twin.workload import Job, Shape, mig_shape

START = datetime.datetime(2027, 3, 1, 0, 0, tzinfo=datetime.UTC)
"""Virtual time 0 on both sides (the portal's clock, the twin's ``Policy.start``): a 5-minute edge."""
MODEL = "A100"
SHARES = {"nlp": 1, "vision": 2, "speech": 1}
"""Fair-share shares, when a case has fair share: vision's two shares put it first in line until
it has used twice what the others have."""
IDLE_RULES = (
    IdleRule(1, "nlp-standard-idle", "nlp", "gpu-standard", 0.3, Rules(window_minutes=60, grace_minutes=30), "reclaim"),
    IdleRule(2, "vision-idle", "vision", None, 0.2, Rules(window_minutes=45, grace_minutes=15), "notify"),
)
"""Idle policies, when a case has them: nlp's standard grants busy under 30 % are warned after an
hour and reclaimed half an hour later; vision's under 20 % are warned after 45 minutes."""
CLASSES = {
    "gpu-production": PriorityClass("gpu-production", 100000, True, Decimal(1), 1800.0),
    "gpu-standard": PriorityClass("gpu-standard", 10000, True, Decimal(1), 900.0),
    "gpu-preemptible": PriorityClass("gpu-preemptible", 100, False, Decimal(1), 0.0),
}
FLAVORS = {"a100": Shape(1, 1000, frozenset({MODEL})), "a100-half": Shape(1, 500, frozenset({MODEL})),
           "a100-quarter": Shape(1, 250, frozenset({MODEL}))}
OVERSUBSCRIBING = {"gpu-production": Decimal("1.25"), "gpu-standard": Decimal("1.5"), "gpu-preemptible": Decimal(2)}
"""Every class oversubscribing (``fidelity_case(factors=...)``): production by a quarter, standard
by half, preemptible twice."""
MIG_MODEL = "A100-SXM4-80GB"
"""The model of the MIG case: an A100 of 80 GB, whose geometry (``A100-80GB``) the name tells."""
MIG_FLAVORS = {"a100": Shape(1, 1000, frozenset({MIG_MODEL})), "a100-half": Shape(1, 500, frozenset({MIG_MODEL})),
               **{f"a100-mig-{profile.split('.')[0]}": mig_shape(profile, frozenset({MIG_MODEL}))
                  for profile in ("1g.10gb", "2g.20gb", "3g.40gb")}}
"""The MIG case's catalogue: a whole GPU, a half (a vGPU share) and MIG instances of three profiles."""


@dataclass(frozen=True)
class Team:
    parent: str
    guarantee: Decimal  # of the installed GPUs
    demand: Decimal  # of the lines


TEAMS = {"nlp-asr": Team("nlp", Decimal("0.2"), Decimal("0.25")),
         "nlp-mt": Team("nlp", Decimal("0.15"), Decimal("0.15"))}
"""The nested case's teams under nlp: their guarantees (0.35 of the cluster) lie within nlp's (0.5),
so nlp lends what its teams leave unused and its own projects borrow within it; a team's request
within its guarantee may take what its sibling or nlp's own projects borrow under nlp."""


def window_rules(hours: float) -> tuple[WindowRule, ...]:
    """Two windows that raise a quota from an edge within the replay until after its end: speech,
    limited to its guarantee, may borrow 14 more from a third of the way; vision is guaranteed 6
    more from two thirds (the first case of the rules over time; ``period_window_rules`` has
    windows that end and lower a number within requests' periods)."""
    until = START + datetime.timedelta(days=90)

    def at(fraction: float) -> datetime.datetime:
        return START + datetime.timedelta(seconds=int(hours * 3600 * fraction) // 300 * 300)

    return (WindowRule("speech", WindowSpec(1, "temporary", at(1 / 3), until, limit_delta=Decimal(14))),
            WindowRule("vision", WindowSpec(2, "temporary", at(2 / 3), until, guaranteed_delta=Decimal(6))))


def period_window_rules(hours: float, guarantees: dict[str, Decimal], shrink_policy: str = "wait",
                        ) -> tuple[WindowRule, ...]:
    """Windows whose edges fall within requests' periods (docs/twin.md, "Fidelity"): speech,
    limited to its guarantee, may borrow 14 more from a quarter of the way until half way (a raise
    that ends: a request whose period crosses its end must fit without it); nlp's limit is lowered to
    its guarantee from 0.6 of the way to 0.8 (a shrink: a request whose period reaches into it must
    fit the shrunk limit next to what holds then; with ``shrink_policy`` ``wait``, the portal's
    default, what holds beyond it runs on, with ``reclaim`` the edge takes it back); vision is
    guaranteed 6 more from two thirds until after the replay. Under ``reclaim`` nlp's limit is
    lowered to half its guarantee, so that the edge finds it beyond."""

    def at(fraction: float) -> datetime.datetime:
        return START + datetime.timedelta(seconds=int(hours * 3600 * fraction) // 300 * 300)

    return (WindowRule("speech", WindowSpec(1, "temporary", at(1 / 4), at(1 / 2), limit_delta=Decimal(14))),
            WindowRule("nlp", WindowSpec(2, "temporary", at(0.6), at(0.8),
                                         limit=guarantees["nlp"] / (2 if shrink_policy == "reclaim" else 1)), shrink_policy),
            WindowRule("vision", WindowSpec(3, "temporary", at(2 / 3), START + datetime.timedelta(days=90),
                                            guaranteed_delta=Decimal(6))))


def share_window_rules(hours: float, guarantees: dict[str, Decimal]) -> tuple[WindowRule, ...]:
    """Windows of one priority class's share of a quota: nlp's preemptible work may hold at most 4
    GPU-equivalents by day (08:00 to 20:00 in Berlin, every day, as the demo's window); vision's
    standard work 2 less than vision's limit from a third of the way to two thirds; and from half
    way to three quarters nlp's limit falls to its guarantee (``wait``) while its standard share's
    guarantee is 0 under ``reclaim``: that share's limit falls with nlp's, and its edge takes back
    what standard work holds beyond it (admitted under its class's factor, which a shrink
    ignores)."""

    def at(fraction: float) -> datetime.datetime:
        return START + datetime.timedelta(seconds=int(hours * 3600 * fraction) // 300 * 300)

    by_day = WindowSpec(1, "recurring", START + datetime.timedelta(hours=7), rrule="FREQ=DAILY", timezone="Europe/Berlin",
                        duration=datetime.timedelta(hours=12), limit=Decimal(4))
    return (WindowRule("nlp", by_day, priority_class="gpu-preemptible"),
            WindowRule("vision", WindowSpec(2, "temporary", at(1 / 3), at(2 / 3), limit_delta=Decimal(-2)),
                       priority_class="gpu-standard"),
            WindowRule("nlp", WindowSpec(3, "temporary", at(1 / 2), at(3 / 4), limit=guarantees["nlp"])),
            WindowRule("nlp", WindowSpec(4, "temporary", at(1 / 2), at(3 / 4), guaranteed=Decimal(0)), "reclaim",
                       priority_class="gpu-standard"))


FLAVOR_QUOTAS = {"nlp": (FlavorQuota("a100", Decimal(4), Decimal(8)),),
                 "vision": (FlavorQuota("a100-half", Decimal(4), Decimal(8)),),
                 "speech": (FlavorQuota("a100-quarter", Decimal(0), Decimal(8)), FlavorQuota("a100", Decimal(0), Decimal(2)))}
"""Flavors' quotas, when a case has them (units of each flavor, checked besides the department's
GPU-equivalents): nlp at most 8 whole A100s, vision 8 halves, speech 8 quarters and 2 whole A100s."""


def flavor_window_rules(hours: float) -> tuple[WindowRule, ...]:
    """Windows on departments' quotas of flavors (``FLAVOR_QUOTAS``): nlp's whole A100s lowered
    from 8 to 4 from a third of the way to two thirds under ``reclaim`` (what nlp holds of them
    beyond 4 at the edge, admitted under its class's factor, is taken back); vision's halves 4 more
    from half way; speech's preemptible share of its quarters at most 2 by day (08:00 to 20:00 in
    Berlin)."""

    def at(fraction: float) -> datetime.datetime:
        return START + datetime.timedelta(seconds=int(hours * 3600 * fraction) // 300 * 300)

    by_day = WindowSpec(3, "recurring", START + datetime.timedelta(hours=7), rrule="FREQ=DAILY", timezone="Europe/Berlin",
                        duration=datetime.timedelta(hours=12), limit=Decimal(2))
    return (WindowRule("nlp", WindowSpec(1, "temporary", at(1 / 3), at(2 / 3), limit=Decimal(4)), "reclaim",
                       flavor="a100"),
            WindowRule("vision", WindowSpec(2, "temporary", at(1 / 2), START + datetime.timedelta(days=90),
                                            limit_delta=Decimal(4)), flavor="a100-half"),
            WindowRule("speech", by_day, priority_class="gpu-preemptible", flavor="a100-quarter"))


def _windows(hours: float, guarantees: dict[str, Decimal], windows: bool, within: bool,
             shrink_policy: str) -> tuple[WindowRule, ...]:
    if not windows:
        return ()
    return period_window_rules(hours, guarantees, shrink_policy) if within else window_rules(hours)


@dataclass(frozen=True)
class Case:
    jobs: list[Job]
    nodes: list[Node]
    policy: Policy


def fidelity_case(requests: int, *, seed: int = 1, nodes: int = 6, shares: bool = True, classes: bool = True,
                  scheduled: bool = True, hours: float = 240.0, half_life_s: float | None = None,
                  idle: bool = False, windows: bool = False, within: bool = False, mig_nodes: int = 0,
                  shrink_policy: str = "wait", factors: Mapping[str, Decimal] | None = None,
                  limit_ratio: Decimal | None = None, nested: bool = False, share_windows: bool = False,
                  flavor_quotas: bool = False, flavor_windows: bool = False, ahead_share: float = 0.15) -> Case:
    """``requests`` lines over ``hours``, on ``nodes`` nodes of 8 GPUs; with ``half_life_s``,
    waiting requests are ordered by fair share (``SHARES``, usage decaying with that half-life);
    with ``idle``, the ``IDLE_RULES`` watch the grants; with ``windows``, ``window_rules``, or with
    ``within`` as well, ``period_window_rules`` (its shrink under ``shrink_policy``); with ``mig_nodes``, the first that many nodes are
    in MIG mode (``A100-80GB``) and the flavors are ``MIG_FLAVORS``; ``factors``: priority classes'
    oversubscription factors (a class's requests checked against each limit times its factor; 1
    where not named); ``limit_ratio``: each department's limit its guarantee times it (else the
    cluster, or speech's guarantee with ``windows``); ``nested``: two teams under nlp (``TEAMS``),
    guaranteed within nlp's guarantee, asking part of nlp's demand beside nlp's own projects;
    ``share_windows``: ``share_window_rules`` (windows of one class's share) besides any others;
    ``flavor_quotas``: the departments' ``FLAVOR_QUOTAS``, and with ``flavor_windows`` the
    ``flavor_window_rules`` on them; ``ahead_share``: the share of the lines (with ``scheduled``)
    that ask a later start, half an hour to five and a half hours after their submission."""
    rng = random.Random(seed)
    model = MIG_MODEL if mig_nodes else MODEL
    cluster = [Node(f"node-{k:02d}", 128000, 1048576,
                    tuple(Gpu(i, model, mig_geometry="A100-80GB" if k < mig_nodes else None) for i in range(8)))
               for k in range(nodes)]
    installed = Decimal(8 * nodes)
    weights = {"nlp": Decimal("0.5"), "vision": Decimal("0.3"), "speech": Decimal("0.2"),
               **({name: team.guarantee for name, team in TEAMS.items()} if nested else {})}
    guarantees = {name: (installed * share).to_integral_value() for name, share in weights.items()}
    limits = {name: guarantees[name] if windows and name == "speech" else installed for name in weights}
    if limit_ratio is not None:
        limits = {name: min(installed, (guarantees[name] * limit_ratio).to_integral_value()) for name in weights}
    departments = tuple(Department(name, guarantees[name], limits[name], SHARES.get(name, 1) if half_life_s else 1,
                                   TEAMS[name].parent if name in TEAMS else None,
                                   FLAVOR_QUOTAS.get(name, ()) if flavor_quotas else ()) for name in weights)
    demand = [0.55, 0.3, 0.15] if not nested else [0.15, 0.3, 0.15, *(float(t.demand) for t in TEAMS.values())]
    class_names = list(CLASSES) if classes else ["gpu-standard"]
    classes_used = {name: CLASSES[name] for name in class_names}
    for name, factor in (factors or {}).items():
        classes_used[name] = replace(classes_used[name], factor=factor)
    policy = Policy(departments, classes_used,
                    MIG_FLAVORS if mig_nodes else FLAVORS if shares else {"a100": FLAVORS["a100"]}, START,
                    _windows(hours, guarantees, windows, within, shrink_policy)
                    + (share_window_rules(hours, guarantees) if share_windows else ())
                    + (flavor_window_rules(hours) if flavor_quotas and flavor_windows else ()), IDLE_RULES if idle else (),
                    fair_share_half_life_s=half_life_s)
    flavors = list(policy.flavors)
    jobs: list[Job] = []
    at = 0.0
    for line in range(1, requests + 1):
        at += rng.expovariate(requests / (hours * 3600))
        department = rng.choices(list(weights), weights=demand)[0]
        flavor = flavors[rng.randrange(len(flavors))]
        quantity = rng.choice((1, 1, 2, 2, 3, 4, 6, 8))
        runtime = float(rng.randrange(15, 16 * 60) * 60)
        priority = rng.choices(class_names, weights=[0.15, 0.6, 0.25][: len(class_names)] if classes else [1])[0]
        starts = at + rng.randrange(1, 12) * 1800.0 if scheduled and rng.random() < ahead_share else None
        submit = float(int(at))
        jobs.append(Job(line, submit, department, f"{department}-work", policy.flavors[flavor], quantity, runtime,
                        float(-(-runtime // 3600) * 3600), priority, round(rng.random(), 2), flavor,
                        float(int(starts)) if starts is not None else None))
    return Case(jobs, cluster, policy)
