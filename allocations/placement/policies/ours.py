"""Our default policy (placeholder: FGD until designed)."""

from __future__ import annotations

from typing import ClassVar

from .fgd import FGD


class Ours(FGD):
    name: ClassVar[str] = "ours"
