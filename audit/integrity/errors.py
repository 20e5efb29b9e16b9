"""The one exception every integrity check raises: a kind, the first bad sequence number, a message."""

from __future__ import annotations


class VerificationFailure(Exception):
    """Verification found a defect.

    ``kind`` is a stable short name (``altered``, ``missing``, ``truncated``, ``reordered``,
    ``duplicated``, ``injected``, ``signature``, ``unknown-key``, ``stale-checkpoint``,
    ``split-view``, ``incomplete``, ...); ``seq`` the first bad event sequence number when one can
    be named; ``message`` says what was found and what it means.
    """

    def __init__(self, kind: str, message: str, *, seq: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.seq = seq
        self.message = message

    def __str__(self) -> str:
        where = f" at seq {self.seq}" if self.seq is not None else ""
        return f"{self.kind}{where}: {self.message}"
