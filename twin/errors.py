"""The one error of bad input: where (the source, its line or entry) and which field."""

from __future__ import annotations


class TwinInputError(ValueError):
    """Bad input to the twin, naming the source, the line (or entry) and the field."""

    def __init__(self, source: str, line: int | str, field: str, message: str) -> None:
        self.source, self.line, self.field, self.message = source, line, field, message
        super().__init__(f"{source}:{line}: {field}: {message}")
