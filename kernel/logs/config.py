"""The one logging configuration of every process: Django (``settings.LOGGING``), gunicorn
(``logconfig_dict`` in ``gpuportal/gunicorn_conf.py``) and Celery (``setup_logging`` in
``gpuportal/celery.py``).

One handler on the root logger writes every record to standard error in the chosen format; the
loggers of Django, gunicorn and Celery lose their own handlers and propagate to it, so each line is
written once and in one format. Two loggers are held back on purpose: ``django.db.backends`` (SQL
with its parameters) never below INFO, and ``django.server`` (``runserver``'s own line per request,
written after the request's context is gone) only from ERROR, since ``gpuportal.access`` writes
that line with the request id. ``gunicorn.access`` is left alone: the portal's gunicorn
configuration turns gunicorn's access log off (``gpuportal/gunicorn_conf.py``), and a gunicorn run
with ``--access-logfile`` (the fuzz step's) keeps its own file and format.
"""

from __future__ import annotations

import logging
from typing import Any

LOG_FORMATS = ("json", "console")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

_FORMATTERS = {
    "json": "kernel.logs.formatters.JsonFormatter",
    "console": "kernel.logs.formatters.ConsoleFormatter",
}


def logging_config(*, log_format: str, level: str) -> dict[str, Any]:
    """The ``logging.config.dictConfig`` of the portal's processes."""
    if log_format not in _FORMATTERS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {log_format!r}")
    level = level.upper()
    if level not in LOG_LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LOG_LEVELS)}, got {level!r}")
    propagate_only = {"handlers": [], "propagate": True}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"portal": {"()": _FORMATTERS[log_format]}},
        "handlers": {
            "portal": {"class": "logging.StreamHandler", "formatter": "portal", "stream": "ext://sys.stderr"},
        },
        "root": {"handlers": ["portal"], "level": level},
        "loggers": {
            "django": {**propagate_only, "level": level},
            "django.server": {**propagate_only, "level": "ERROR"},
            "django.db.backends": {**propagate_only, "level": _at_least("INFO", level)},
            "gunicorn.error": {**propagate_only, "level": level},
            "celery": {**propagate_only, "level": level},
            "gpuportal.access": {**propagate_only, "level": level},
        },
    }


def _at_least(floor: str, level: str) -> str:
    return floor if logging.getLevelName(floor) > logging.getLevelName(level) else level
