"""Template helpers: the role-based navigation, number and time formatting and the sharing modes' guidance."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django import template
from django.http import HttpRequest
from django.template.defaultfilters import date

from allocations.catalogue.sharing_guide import ModeGuide, guide_for
from allocations.models import Allocation, Flavor
from allocations.models.versions import Minimums
from frontend.navigation import nav_items
from frontend.selectors import requestable_projects
from frontend.timeline import SyncStatus, partial_reclaim_words, sync_status
from kernel import times
from kernel.numbers import plain
from tenants.access import access_for

register = template.Library()


@register.inclusion_tag("frontend/_nav.html", takes_context=True)
def portal_nav(context: template.Context) -> dict[str, Any]:
    request: HttpRequest | None = context.get("request")
    user = getattr(request, "user", None)
    if request is None or user is None or not user.is_authenticated:
        return {"items": [], "user": None}
    access = access_for(user)
    items = nav_items(
        access=access,
        can_request=access.has_any_role and requestable_projects(user=user).exists(),
        is_staff=bool(getattr(user, "is_staff", False)),
    )
    match = request.resolver_match
    current = match.view_name if match is not None else ""
    return {
        "items": [(item, current in item.section) for item in items],
        "user": user,
        "current": current,
        "request": request,
        "csrf_token": context.get("csrf_token"),
    }


# Times as the pages write them (kernel/times.py), in UTC like Django's own date filter: empty for
# no time.
@register.filter(expects_localtime=True)
def to_minute(value: Any) -> str:
    """``2026-12-16 15:55``."""
    return date(value, times.TEMPLATE_MINUTE)


@register.filter(expects_localtime=True)
def to_second(value: Any) -> str:
    """``2026-12-16 15:55:07``."""
    return date(value, times.TEMPLATE_SECOND)


@register.filter(expects_localtime=True)
def to_day(value: Any) -> str:
    """``2026-12-16``."""
    return date(value, times.TEMPLATE_DAY)


@register.filter(expects_localtime=True)
def to_month(value: Any) -> str:
    """``2026-12``."""
    return date(value, times.TEMPLATE_MONTH)


@register.filter(expects_localtime=True)
def to_iso(value: Any) -> str:
    """``2026-12-16T15:55:07.123456+00:00``, for a ``<time datetime>``."""
    return date(value, times.TEMPLATE_ISO)


@register.filter
def num(value: Any, places: int = 2) -> str:
    """A decimal rounded to ``places`` and without trailing zeros: ``4.0000`` → ``4``, ``8.2645`` → ``8.26``."""
    if value is None or value == "":
        return ""
    if not isinstance(value, Decimal):
        value = Decimal(str(value))
    rounded = value.quantize(Decimal(1).scaleb(-int(places)), rounding=ROUND_HALF_UP)
    return plain(rounded)


@register.filter
def sync(allocation: Allocation) -> SyncStatus:
    return sync_status(allocation)


@register.filter
def gives_back(allocation: Allocation) -> str:
    return partial_reclaim_words(allocation)


@register.filter
def gpu_eq(allocation: Allocation) -> Decimal:
    return allocation.flavor.gpu_equivalents_for(allocation.quantity)


@register.filter
def lookup(mapping: dict[Any, Any], key: Any) -> Any:
    return mapping.get(key, key) if key is not None else None


@register.filter
def sharing_guide(mode: str) -> ModeGuide | None:
    """What a sharing mode is for and its caveats (``allocations.catalogue.sharing_guide``)."""
    return guide_for(mode)


@register.filter
def minimums(flavor: Flavor) -> str:
    """``driver ≥ 535.104.05 and CUDA ≥ 12.2``: what a node must report to be offered the flavor."""
    return Minimums(flavor.min_driver_version, flavor.min_cuda_version).describe()
