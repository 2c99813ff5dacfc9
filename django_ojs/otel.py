"""OpenTelemetry spans for enqueue and execution (observability §5), on both chains.

Needs ``opentelemetry-api`` (``pip install 'django-ojs[otel]'``) and, to export anything,
the application's SDK and exporter. Use it instead of
:class:`~django_ojs.middleware.TraceContextMiddleware`::

    OJS_ENQUEUE_MIDDLEWARE = ["django_ojs.otel.OpenTelemetryMiddleware", ...]
    OJS_EXECUTION_MIDDLEWARE = ["django_ojs.otel.OpenTelemetryMiddleware", ...]

* Enqueue: a ``PRODUCER`` span ``<queue> publish`` around the push, child of whatever span
  is current (your request's, with Django instrumentation); its context is written to
  ``meta`` with the configured propagator (W3C ``traceparent``/``tracestate`` by default).
* Execution: a ``CONSUMER`` span ``<queue> process`` whose parent is the enqueue span
  (extracted from ``meta``), current while the handler runs, so spans your handler makes
  (database, HTTP) are its children; an exception is recorded and sets the status.

Attributes follow the messaging semantic conventions: ``messaging.system = "ojs"``,
``messaging.operation``, ``messaging.destination.name`` (queue),
``messaging.message.id`` (job id), plus ``ojs.job.type`` and ``ojs.job.attempt``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from django_ojs import tracing
from django_ojs.envelope import JobSpec

try:
    from opentelemetry import propagate, trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError:  # pragma: no cover - the extra is not installed
    trace = None  # type: ignore[assignment]


class OpenTelemetryMiddleware:
    """Spans for each push and each attempt, linked across processes through ``meta``."""

    def __init__(self) -> None:
        if trace is None:
            raise ImportError(
                "OpenTelemetryMiddleware needs opentelemetry-api: pip install 'django-ojs[otel]'"
            )
        self.tracer = trace.get_tracer("django_ojs")

    def __call__(self, job: Any, *rest: Any) -> Any:
        if len(rest) == 1:
            return self.enqueue(job, rest[0])
        return self.execute(job, rest[0], rest[1])

    def enqueue(self, job: JobSpec, next: Any) -> JobSpec | None:
        attributes = {
            "messaging.system": "ojs",
            "messaging.operation": "publish",
            "messaging.destination.name": job.queue,
            "messaging.message.id": str(job.id),
            "ojs.job.type": job.type,
        }
        with self.tracer.start_as_current_span(
            f"{job.queue} publish", kind=SpanKind.PRODUCER, attributes=attributes
        ):
            carrier: dict[str, str] = {}
            propagate.inject(carrier)
            if carrier:
                job = replace(job, meta={**job.meta, **carrier})
            return next(job)  # type: ignore[no-any-return]

    def execute(self, job: Mapping[str, Any], ctx: Any, next: Any) -> Any:
        meta = job.get("meta") or {}
        carrier = {k: v for k, v in meta.items() if isinstance(v, str)}
        parent = propagate.extract(carrier)
        queue = str(job.get("queue") or "default")
        attributes: dict[str, str | int] = {
            "messaging.system": "ojs",
            "messaging.operation": "process",
            "messaging.destination.name": queue,
            "messaging.message.id": str(job.get("id")),
            "ojs.job.type": str(job.get("type")),
            "ojs.job.attempt": int(ctx.attempt or 0),
        }
        with self.tracer.start_as_current_span(
            f"{queue} process",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            record_exception=True,
            set_status_on_exception=True,
        ) as span:
            span_context = span.get_span_context()
            current = None
            if span_context.is_valid:
                current = tracing.TraceContext(
                    format(span_context.trace_id, "032x"),
                    format(span_context.span_id, "016x"),
                    bool(span_context.trace_flags & 1),
                )
                ctx.trace = current
            with tracing.use(current, job_id=str(job.get("id") or "")):
                result = next()
            span.set_status(Status(StatusCode.OK))
            return result
