"""Reads made once and shared: for a page that asks the same question of the database for many
rows (the approvals queue previews every pending request), each distinct read runs once."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, ParamSpec, TypeVar, cast

P = ParamSpec("P")
T = TypeVar("T")


class SharedReads:
    """Results of reads by key, for the length of one request: nothing here notices a write, so
    share one only among reads of the same moment, and do not keep it."""

    def __init__(self) -> None:
        self._found: dict[Hashable, Any] = {}

    def once(self, key: Hashable, read: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``read(*args, **kwargs)`` the first time ``key`` is asked for; what it returned after that."""
        if key not in self._found:
            self._found[key] = read(*args, **kwargs)
        return cast(T, self._found[key])

    def known(self, key: Hashable) -> Any | None:
        """What ``key`` was read as already, or None."""
        return self._found.get(key)
