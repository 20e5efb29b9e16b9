"""OpenTelemetry tracing, on only when an OTLP endpoint is configured.

With ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) set, every process
that loads the apps (gunicorn's workers, ``runserver``, a Celery worker and beat, a management
command) exports its spans over OTLP/HTTP in batches: a span per request (Django), per task sent
and run (Celery, linked to the request that sent it through the message) and per SQL statement
(psycopg). The SDK reads its own ``OTEL_*`` variables (``OTEL_SERVICE_NAME``, headers, sampling,
timeouts). Log records written inside a span carry its ``trace_id`` and ``span_id``
(``kernel.logs.context``).

The packages are the optional ``otel`` extra (``pip install 'gpuportal[otel]'``), kept out of the
runtime lock. An endpoint set without them, or without one of the instrumentations, is a warning
at start, never a failure; without an endpoint nothing of OpenTelemetry is imported.
"""

from __future__ import annotations

import importlib
import logging

from kernel.conf import setting_optional_str, setting_str

log = logging.getLogger(__name__)

# (module, class) of each instrumentation, applied when its package is installed.
INSTRUMENTATIONS: tuple[tuple[str, str], ...] = (
    ("opentelemetry.instrumentation.django", "DjangoInstrumentor"),
    ("opentelemetry.instrumentation.celery", "CeleryInstrumentor"),
    ("opentelemetry.instrumentation.psycopg", "PsycopgInstrumentor"),
)
_configured = False


def tracing_endpoint() -> str | None:
    return setting_optional_str("OTEL_EXPORTER_OTLP_ENDPOINT")


def tracing_configure() -> bool:
    """Export spans when an endpoint is set (once per process); whether tracing is on."""
    global _configured
    if _configured:
        return True
    if tracing_endpoint() is None:
        return False
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as error:
        log.warning(
            "OTEL_EXPORTER_OTLP_ENDPOINT is set but OpenTelemetry is not installed (%s is missing): tracing is off; "
            "install the otel extra (pip install 'gpuportal[otel]')", error.name,
        )
        return False
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: setting_str("OTEL_SERVICE_NAME")}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))  # the endpoint from the environment
    trace.set_tracer_provider(provider)
    instrumented = []
    for module_name, class_name in INSTRUMENTATIONS:
        try:
            instrumentor = getattr(importlib.import_module(module_name), class_name)
        except ImportError:
            log.warning("tracing without %s: its package is not installed (the otel extra has it)", module_name)
            continue
        instrumentor().instrument(tracer_provider=provider)
        instrumented.append(module_name.rsplit(".", 1)[-1])
    _configured = True
    log.info("tracing on: spans exported over OTLP (%s)", ", ".join(instrumented) or "no instrumentation")
    return True


def tracing_flush(timeout_millis: int = 5000) -> bool:
    """Export the spans still buffered (a short-lived process's last ones); ``True`` without tracing."""
    if not _configured:
        return True
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    flush = getattr(provider, "force_flush", None)
    return bool(flush(timeout_millis)) if flush is not None else True
