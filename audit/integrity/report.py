"""What a successful bundle verification reports: the checkpoint, the scope, the counts, what
completeness the scope proves, and every quarantine of the log up to the checkpoint."""

from __future__ import annotations

from dataclasses import dataclass, field

from audit.integrity.bundle import Scope
from audit.integrity.checkpoint import Checkpoint


@dataclass
class BundleReport:
    checkpoint: Checkpoint
    scope: Scope
    events: int = 0
    context: int = 0
    completeness: str = ""
    notes: list[str] = field(default_factory=list)
    quarantines: list[str] = field(default_factory=list)  # one line per audit.quarantined event

    def summary(self) -> str:
        lines = [
            f"OK: {self.events} events verified against {self.checkpoint.describe()} of {self.checkpoint.origin}",
            f"  {self.completeness}",
        ]
        lines.extend(f"  {note}" for note in self.notes)
        lines.extend(f"  QUARANTINE: {line}" for line in self.quarantines)
        return "\n".join(lines)
