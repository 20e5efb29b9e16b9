"""Reading the provider's claims: the groups (a configurable dotted path) and a new account's username."""

from __future__ import annotations

import re
from typing import Any

from django.contrib.auth.models import User

USERNAME_MAX = 150
_NOT_USERNAME = re.compile(r"[^\w.@+-]+")


def claims_groups(claims: dict[str, Any], *, path: str) -> list[str]:
    """The groups at ``path`` (``groups``, ``realm_access.roles``…): a list of strings, or one string
    of groups separated by ``;``. Anything else (absent, a number, nested objects) is no group."""
    value: Any = claims
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return []
        value = value[part]
    if isinstance(value, str):
        items = value.split(";")
    elif isinstance(value, list):
        items = [item for item in value if isinstance(item, str)]
    else:
        return []
    return sorted({item.strip() for item in items if item.strip()})


def username_for(claims: dict[str, Any]) -> str:
    """A free username for a new account: ``preferred_username`` (else the e-mail's local part, else
    ``user``), reduced to the characters Django allows, with ``-2``, ``-3``… added when taken."""
    candidates = [claims.get("preferred_username"), str(claims.get("email") or "").split("@")[0], "user"]
    base = next(
        (cleaned for raw in candidates if isinstance(raw, str) and (cleaned := _NOT_USERNAME.sub("-", raw).strip("-"))),
        "user",
    )[: USERNAME_MAX - 8]
    name, suffix = base, 1
    while User.objects.filter(username__iexact=name).exists():
        suffix += 1
        name = f"{base}-{suffix}"
    return name
