"""Decimals as people read them: ``4.0000`` → ``4``, ``0.1430`` → ``0.143``, ``100`` → ``100``
(never ``1E+2``). The one formatter of the API's, the pages' and the audit log's plain numbers."""

from __future__ import annotations

from decimal import Decimal


def plain(value: Decimal) -> str:
    return format(value.normalize(), "f")
