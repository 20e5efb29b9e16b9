"""Reading a bundle's lines, with the look-ahead the verifier needs to name a defect."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

from audit.integrity.bundle import META_PREFIX


class BundleLines:
    """The bundle's lines with one line of look-ahead (to tell a swap from a deletion)."""

    def __init__(self, lines: Iterable[bytes]) -> None:
        self._iterator = iter(lines)
        self._buffer: list[bytes] = []
        self.number = 0

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        line = self._buffer.pop(0) if self._buffer else next(self._iterator)
        self.number += 1
        return line.rstrip(b"\r\n")

    def peek_next_event_seq(self) -> int | None:
        for _ in range(4):
            try:
                line = next(self._iterator)
            except StopIteration:
                return None
            self._buffer.append(line)
            stripped = line.rstrip(b"\r\n")
            record = stripped
            if stripped.startswith(META_PREFIX):
                try:
                    meta = json.loads(stripped)
                except json.JSONDecodeError:
                    return None
                if meta.get("@") != "context":
                    continue
                record = str(meta.get("record", "")).encode("ascii", "replace")
            try:
                seq = json.loads(record).get("seq")
            except (json.JSONDecodeError, AttributeError):
                return None
            return seq if isinstance(seq, int) else None
        return None
