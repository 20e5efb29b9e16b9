"""What a successful bundle verification reports: the checkpoint, the scope, the counts, what
completeness the scope proves, and every quarantine of the log up to the checkpoint (the first
answer: the bundle is genuine), then whether it is complete as of now (the second answer,
``audit.integrity.currency``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from audit.integrity.bundle import Scope
from audit.integrity.checkpoint import Checkpoint
from audit.integrity.currency import Currency


@dataclass
class BundleReport:
    checkpoint: Checkpoint
    scope: Scope
    events: int = 0
    context: int = 0
    completeness: str = ""
    notes: list[str] = field(default_factory=list)
    quarantines: list[str] = field(default_factory=list)  # one line per audit.quarantined event
    currency: Currency | None = None

    @property
    def current(self) -> bool | None:
        """True: complete as of the newest checkpoint known; False: a newer one covers more events;
        None: no newer checkpoint could be known."""
        return self.currency.current if self.currency is not None else None

    def summary(self) -> str:
        lines = [
            f"OK: {self.events} events verified against {self.checkpoint.describe()} of {self.checkpoint.origin}",
            f"  {self.completeness}",
        ]
        lines.extend(f"  {note}" for note in self.notes)
        lines.extend(f"  QUARANTINE: {line}" for line in self.quarantines)
        if self.currency is not None:
            lines.append(self.currency.line)
        return "\n".join(lines)
