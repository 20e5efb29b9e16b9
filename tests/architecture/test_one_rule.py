"""One rule, one place: a rule that was written several ways lives in one module, and a copy of it
anywhere else in shipped code fails here. Each rule is data: what its copies look like (checked
against samples of the copies it replaced, so a pattern that matches nothing fails too) and the
one module allowed to hold it."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass

import click
import pytest
from django.conf import settings

from cli.commands.allocations import _when as cli_when
from cli.commands.requests import request_group
from gpuportal.packages import LAYERS, PACKAGES, PORTAL_APPS, SHIPPED, STANDALONE
from kernel.limits import QUANTITY_MAX
from kernel.times import time_readable
from tests.architecture.imports import EXTRA_ALLOWED, ROOT, source_files


@dataclass(frozen=True)
class OneRule:
    name: str
    copy: re.Pattern[str]  # what a copy of the rule looks like in the source
    home: str  # the one module that holds it
    samples: tuple[str, ...]  # copies it replaced: the pattern must find each
    # Modules that keep a copy because they may not import the home, each with why.
    elsewhere: tuple[tuple[str, str], ...] = ()


RULES = (
    OneRule("plain decimals", re.compile(r'\.normalize\(\)(,\s*"f"\)|:f\})'), "kernel/numbers.py",
            ('return format(value.normalize(), "f")', 'format(rounded.normalize(), "f")',
             'f"capped at {limit.normalize():f} {what}"', '{obj.gpu_equivalents.normalize():f} GPU-eq. per unit)"')),
    OneRule("the quantity bound", re.compile(r"(max_value=|MaxValueValidator\(|<=\s*)10_?000\b"), "kernel/limits.py",
            ("IntegerField(min_value=1, max_value=10000)", "MaxValueValidator(10000)", "1 <= quantity <= 10000")),
    OneRule("the default priority class", re.compile(r'filter\(name="gpu-standard"\)'), "allocations/catalogue/selectors.py",
            ('priority_class_list(user=user).filter(name="gpu-standard").first()',)),
    # Delivery's settings are delivery's: the inventory below it (clusters) held them and delivery
    # reached down for them. The settings module defines them; only delivery/conf.py reads them.
    OneRule("delivery's settings", re.compile(r'setting_\w+\("GPUPORTAL_(PUSH|KUBE|LIMITRANGE)_'), "delivery/conf.py",
            ('return setting_int("GPUPORTAL_PUSH_MAX_ATTEMPTS")', 'policy = setting_str("GPUPORTAL_KUBE_PRUNE_POLICY")',
             'return setting_str("GPUPORTAL_LIMITRANGE_DEFAULT_CPU")')),
    OneRule("refusal wording", re.compile(r"exceeded for \{|has no quota for \{"), "allocations/quotas/wording.py",
            ('f"Quota exceeded for {what} in department {department} from {starts_at:%Y-%m-%d %H:%M} to "',
             'f"Project cap exceeded for {what} in project {slug} from {starts_at:%Y-%m-%d %H:%M} to "',
             'f"Department {names[department_id]} has no quota for {flavor.name} or for GPU-equivalents."')),
    OneRule("the MIG layout format", re.compile(r'\.get\("(devices|mig-devices|mig-enabled)"|"device-filter" in'),
            "clusters/mig_layout.py",
            ('devices = entry.get("devices", "all")', '(entry.get("mig-devices") or {}).items()',
             'profiles = entry.get("mig-devices", {})', 'mig_enabled=bool(entry.get("mig-enabled")),',
             'if "device-filter" in entry:')),
    OneRule("a quota's scope in a label", re.compile(r'\.name if [^"]*else "GPU-equivalents"'),
            "allocations/quotas/wording.py",
            ('what = flavor.name if flavor is not None else "GPU-equivalents"',
             'flavor=quota.flavor.name if quota.flavor else "GPU-equivalents",')),
    # "1 checkpoints", "1 unit (1 GPU-equivalents)": each sentence picked its plural inline, and some forgot to.
    OneRule("a count's plural", re.compile(r"""(['"])s\1 if [^'"]+ != 1 else (['"])\2|(['"])\3 if [^'"]+ == 1 else (['"])s\4"""),
            "kernel/words.py",
            ("""return f"{hours} hour" + ("s" if hours != 1 else "")""",
             """f"runs {self.notice_minutes} more minute{'s' if self.notice_minutes != 1 else ''}""",
             """f"Your GPU Portal digest: {len(items)} notification{'s' if len(items) != 1 else ''}""",
             """f"{'' if added == 1 else 's'} after this bundle's {checkpoint.describe()} ("""),
            elsewhere=(("audit/integrity/currency.py", "the offline verifier imports nothing of the portal"),
                       ("cli/auditcheck.py", "the client stands alone"), ("cli/auditcurrency.py", "the client stands alone"))),
    OneRule("time formats", re.compile(r"%[YH]|%a %d|%d %b"), "kernel/times.py",
            ('f"{moment:%Y-%m-%d %H:%M} UTC"', '.strftime("%Y%m%dT%H%M%SZ")', 'fmt = "%H:%M" if step < 86400 else "%d %b"',
             'f"{moment:%a %d}"', '{self.hour:%Y-%m-%dT%H}', 'TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"'),
            elsewhere=(
                ("audit/integrity/canonical.py", "the sealed record's own format: the offline verifier imports nothing else"),
                ("cli/commands/allocations.py", "the client stands alone"),
                ("cli/commands/requests.py", "the client stands alone"),
                ("kube_testenv/gpu_nodes.py", "Kubernetes' metav1.Time, in the test control plane, which stands alone"),
            )),
)


def _copies(rule: OneRule) -> list[str]:
    found = []
    for path in source_files():
        relative = str(path.relative_to(ROOT))
        if relative == rule.home or relative in dict(rule.elsewhere):
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if rule.copy.search(line):
                found.append(f"{relative}:{number}: {line.strip()}")
    return found


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.name)
def test_the_rule_has_one_home(rule: OneRule) -> None:
    assert _copies(rule) == []


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.name)
def test_the_pattern_finds_every_copy_it_replaced(rule: OneRule) -> None:
    assert all(rule.copy.search(sample) for sample in rule.samples)
    assert (ROOT / rule.home).is_file()


def test_the_pages_write_times_through_the_portals_filters() -> None:
    """Templates cannot import kernel/times.py: they use frontend's ``to_minute`` and the like."""
    found = [f"{path.relative_to(ROOT)}: {match}" for package in PACKAGES for path in sorted((ROOT / package).rglob("*.html"))
             for match in re.findall(r"\|(?:date|time):\S+", path.read_text())]
    assert found == []


def test_the_command_line_client_writes_times_as_the_portal_does() -> None:
    assert cli_when("2026-12-16T15:55:07+01:00") + " UTC" == time_readable("2026-12-16T15:55:07+01:00")


def test_the_command_line_client_bounds_a_count_as_the_portal_does() -> None:
    """The client stands alone (it imports nothing of the portal), so it keeps its own number."""
    create = request_group.commands["create"]
    count = next(param for param in create.params if param.name == "count")
    assert isinstance(count.type, click.IntRange)
    assert (count.type.min, count.type.max) == (1, QUANTITY_MAX)


# The app list: gpuportal/packages.py is the one list. The settings and the architecture tests read
# it; the files below cannot import it, so each is compared with it here.
TYPED_TOO = ("bench", "tests", "manage.py")  # checked by mypy, neither an app nor shipped


def test_every_app_on_disk_is_installed_and_every_installed_app_is_on_disk() -> None:
    on_disk = {".".join(path.parent.relative_to(ROOT).parts) for package in PACKAGES
               for path in (ROOT / package).rglob("apps.py") if "migrations" not in path.parts}
    assert set(PORTAL_APPS) == on_disk
    assert [app for app in settings.INSTALLED_APPS if app.split(".")[0] in PACKAGES] == list(PORTAL_APPS)


def test_every_top_level_package_is_listed() -> None:
    packages = {path.parent.name for path in ROOT.glob("*/__init__.py") if not path.parent.name.startswith(".")}
    assert packages == {*PACKAGES, *(name for name in TYPED_TOO if (ROOT / name).is_dir())}


def test_pyproject_lists_the_packages() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]
    include = [pattern.removesuffix("*") for pattern in config["setuptools"]["packages"]["find"]["include"]]
    assert include == list(SHIPPED)
    assert config["mypy"]["files"] == [*PACKAGES, *TYPED_TOO]


def test_the_readme_lists_the_packages_in_order() -> None:
    text = (ROOT / "README.md").read_text()
    layout = text[text.index("## Layout"):]
    layout = layout[: layout.index("`tests/`")]
    assert re.findall(r"`(\w+)/`", layout) == list(PACKAGES)


def test_the_architecture_document_lists_the_packages_in_order_with_what_each_may_import() -> None:
    rows = re.findall(r"^\| `(\w+)/` \|.*\| ([^|]+) \|$", (ROOT / "docs" / "architecture.md").read_text(), re.MULTILINE)
    assert [name for name, _ in rows] == list(PACKAGES)
    for name, may in rows:
        if name in STANDALONE or may.startswith(("the apps above", "every app")):
            continue  # the apps above it in the table, which is LAYERS' order (checked above)
        below = LAYERS[: LAYERS.index(name)]
        assert re.findall(r"`(\w+)`", may) == [*below, *sorted(EXTRA_ALLOWED.get(name, ()))], name
