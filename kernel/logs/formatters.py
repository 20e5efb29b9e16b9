"""The two log formats (``GPUPORTAL_LOG_FORMAT``): ``json``, one JSON object a line (the default),
and ``console``, one readable line (for a terminal).

Both write the same things: the time in UTC (ISO 8601, milliseconds, ``Z``), the level, the logger,
the message, the context of ``kernel.logs.context`` and the record's extra fields, secrets redacted
(``kernel.logs.redaction``).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter as _LibraryJsonFormatter

from kernel.logs.context import record_context
from kernel.logs.redaction import REDACTED, redact_text, redact_value, secret_key

# Attributes a library puts on a record that are not for the log line: Django's ``request`` (its
# repr shows the query string) and the terminal colours of some handlers.
_DROPPED = {"request", "color_message", "taskName"}
_RESERVED = set(RESERVED_ATTRS) | _DROPPED


def timestamp(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, tz=UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The fields a caller added with ``extra=``, redacted (by key, and every text by content)."""
    fields: dict[str, Any] = {}
    for key, value in record.__dict__.items():
        if key in _RESERVED or key.startswith("_"):
            continue
        fields[key] = REDACTED if secret_key(key) and value is not None else redact_value(value)
    return fields


class JsonFormatter(_LibraryJsonFormatter):
    """One JSON object a line: ``timestamp``, ``level``, ``logger``, ``message``, ``request_id``,
    ``user``, ``user_id``, then the task, trace and extra fields, then ``exc_info``. ASCII only
    (other characters as ``\\uXXXX``), so a stream of any encoding takes it and a line break in a
    value never breaks the line."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("reserved_attrs", sorted(_RESERVED))
        super().__init__(*args, **kwargs)

    def add_fields(self, log_data: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]) -> None:
        log_data["timestamp"] = timestamp(record)
        log_data["level"] = record.levelname
        log_data["logger"] = record.name
        log_data["message"] = redact_text(record.message) if record.message else record.message
        log_data.update(record_context(record))
        for key, value in message_dict.items():  # a dict logged as the message
            if key not in ("exc_info", "stack_info"):
                log_data[key] = REDACTED if secret_key(key) and value is not None else redact_value(value)
        for key, value in extra_fields(record).items():
            log_data.setdefault(key, value)
        if message_dict.get("exc_info"):
            log_data["exc_info"] = redact_text(str(message_dict["exc_info"]))
        if message_dict.get("stack_info"):
            log_data["stack_info"] = redact_text(str(message_dict["stack_info"]))


class ConsoleFormatter(logging.Formatter):
    """``2026-01-31T12:00:00.000Z INFO    gpuportal.access [req 3f2a… alice] GET / 200 (12.3 ms)``,
    then the extra fields as ``key=value`` and the traceback, if any, on the lines below."""

    def format(self, record: logging.LogRecord) -> str:
        context = record_context(record)
        tags = [f"req {context['request_id']}" if context["request_id"] else "-"]
        if context["user"]:
            tags.append(str(context["user"]))
        if context.get("task_name"):
            tags.append(f"task {context['task_name']}")
        if context.get("trace_id"):
            tags.append(f"trace {context['trace_id']}")
        line = f"{timestamp(record)} {record.levelname:<7} {record.name} [{' '.join(tags)}] "
        line += redact_text(record.getMessage())
        extras = extra_fields(record)
        if extras:
            line += " " + " ".join(f"{key}={value}" for key, value in extras.items())
        if record.exc_info:
            record.exc_text = record.exc_text or self.formatException(record.exc_info)
        if record.exc_text:
            line += "\n" + redact_text(record.exc_text)
        if record.stack_info:
            line += "\n" + redact_text(self.formatStack(record.stack_info))
        return line
