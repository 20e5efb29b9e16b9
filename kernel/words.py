"""Counts as people read them: ``1 unit``, ``2 units``, ``1 checkpoint``. The one place a sentence
of the portal picks a noun's singular or plural; the pages use Django's ``pluralize`` filter."""

from __future__ import annotations


def counted(count: int, noun: str, plural: str = "") -> str:
    """``count`` and ``noun``, plural unless the count is one (``plural`` when it is not ``noun`` + s)."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"
