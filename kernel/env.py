"""Environment parsing that fails loudly.

Every setting comes from an environment variable, read once in ``gpuportal/settings.py`` (code
reads settings at call time through ``kernel.conf``, never the environment). A value that cannot be parsed raises
``ImproperlyConfigured`` naming the variable, so a typo never silently falls back to a default.
Secrets may also be read from ``<NAME>_FILE`` (the Docker and Kubernetes secrets convention).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, overload

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


@overload
def env_str(name: str) -> str | None: ...
@overload
def env_str(name: str, default: str) -> str: ...
@overload
def env_str(name: str, default: None) -> str | None: ...


def env_str(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    lowered = raw.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be one of true/false/1/0/yes/no/on/off, got {raw!r}")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {value}")
    return value


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, got {raw!r}") from None


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return list(default)
    items = [item.strip() for item in raw.split(",")]
    if any(item == "" for item in items):
        raise ImproperlyConfigured(f"{name} must be a comma-separated list without empty items, got {raw!r}")
    return items


def env_secret(name: str) -> str | None:
    """Read ``name`` or, when ``<name>_FILE`` is set, the file it points to."""
    file_name = os.environ.get(f"{name}_FILE")
    if file_name:
        path = Path(file_name)
        if not path.is_file():
            raise ImproperlyConfigured(f"{name}_FILE points to {file_name!r}, which is not a readable file")
        return path.read_text().strip()
    return env_str(name)


def env_cache(name: str) -> dict[str, Any]:
    """Django's default cache from ``name``: a ``redis://`` or ``rediss://`` URL gives Redis, shared by
    every process (with short socket timeouts, so an unreachable Redis fails a request quickly
    instead of holding it); unset gives a per-process memory cache (the embedded default)."""
    url = env_str(name)
    if url is None:
        return {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "gpuportal"}
    if not url.startswith(("redis://", "rediss://")):
        raise ImproperlyConfigured(f"{name} must be a redis:// or rediss:// URL")
    return {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": url,
        "OPTIONS": {"socket_connect_timeout": 2, "socket_timeout": 2},
    }
