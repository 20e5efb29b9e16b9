"""Domain errors raised by services and translated to HTTP in one place (``kernel.api.errors``)."""

from __future__ import annotations

from typing import Any


class ApplicationError(Exception):
    """A business rule refused the operation; ``status`` is the HTTP status the API answers."""

    status = 400
    code = "invalid"

    def __init__(self, message: str, *, details: dict[str, Any] | None = None, fields: dict[str, list[str]] | None = None):
        super().__init__(message)
        self.message = message
        self.details = details or {}
        self.fields = fields or {}


class FieldError(ApplicationError):
    """Bad input naming the field(s) at fault."""

    status = 400
    code = "invalid"

    def __init__(self, field: str, message: str):
        super().__init__(message, fields={field: [message]})


class NotAllowed(ApplicationError):
    """The actor can see the object but its role does not allow the action."""

    status = 403
    code = "permission_denied"


class FourEyes(NotAllowed):
    """Nobody decides on their own request (``GPUPORTAL_FOUR_EYES``)."""

    code = "four_eyes"


class Conflict(ApplicationError):
    status = 409
    code = "conflict"


class TransitionNotAllowed(Conflict):
    code = "transition_not_allowed"


class QuotaExceeded(Conflict):
    code = "quota_exceeded"


class CapacityExceeded(Conflict):
    code = "capacity_exceeded"
