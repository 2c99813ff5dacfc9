"""Metrics (Prometheus text format), readiness, and OpenTelemetry spans linked from the
enqueue to the worker's attempt (OJS observability)."""

from __future__ import annotations

import socket
import urllib.request

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from prometheus_client.parser import text_string_to_metric_families

import django_ojs
from django_ojs import lifecycle, metrics
from django_ojs.context import JobContext
from django_ojs.registry import Handler
from django_ojs.worker import execution
from tests.factories import WorkerFactory
from tests.integration.api_support import client

pytestmark = pytest.mark.django_db(transaction=True)

BOTH = ["django_ojs.metrics.MetricsMiddleware"]


def get_metrics(api):
    return api.client.generic("GET", "/ojs/metrics", headers=api.headers)


def scrape(api) -> dict[str, dict[tuple, float]]:
    response = get_metrics(api)
    assert response.status_code == 200, response.content[:300]
    assert response["Content-Type"].startswith("text/plain")
    out: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            key = tuple(sorted(sample.labels.items()))
            out.setdefault(sample.name, {})[key] = sample.value
    return out


def run(job, handler, *, with_ctx=False):
    ctx = JobContext(job.to_wire(), attempt=job.attempt)
    kind = ("positional", "ctx") if with_ctx else (None, None)
    return execution.run(Handler(job.type, handler, *kind, False), [], ctx)


def test_metrics_endpoint_reports_the_store_and_this_processs_counts(settings):
    settings.OJS_ENQUEUE_MIDDLEWARE = BOTH
    settings.OJS_EXECUTION_MIDDLEWARE = BOTH
    api = client("admin")
    before = scrape(api)
    enqueued_key = (("job_type", "m.work"), ("queue", "mq"))
    base = before.get("ojs_jobs_enqueued_total", {}).get(enqueued_key, 0)
    done_base = before.get("ojs_jobs_completed_total", {}).get(enqueued_key, 0)
    failed_base = before.get("ojs_jobs_failed_total", {}).get(enqueued_key, 0)
    for _ in range(3):
        django_ojs.enqueue("m.work", queue="mq")
    django_ojs.enqueue("m.work", queue="mq2", scheduled_at="+PT1H")
    WorkerFactory(state="running")
    first, second = lifecycle.fetch(["mq"], worker_id="w", count=2)
    assert run(first, lambda: "ok").ok
    assert not run(second, lambda: 1 / 0).ok
    now = scrape(api)
    assert now["ojs_jobs_enqueued_total"][enqueued_key] == base + 3
    assert now["ojs_jobs_completed_total"][enqueued_key] == done_base + 1
    assert now["ojs_jobs_failed_total"][enqueued_key] == failed_base + 1
    assert now["ojs_job_duration_seconds_count"][enqueued_key] >= 2
    assert now["ojs_job_wait_seconds_count"][(("queue", "mq"),)] >= 2
    assert now["ojs_jobs"][(("queue", "mq"), ("state", "available"))] == 1
    assert now["ojs_jobs"][(("queue", "mq"), ("state", "active"))] == 2
    assert now["ojs_jobs"][(("queue", "mq2"), ("state", "scheduled"))] == 1
    assert now["ojs_queue_oldest_available_age_seconds"][(("queue", "mq"),)] >= 0
    assert now["ojs_workers"][(("state", "running"),)] >= 1


def test_metrics_need_the_inspect_scope(db):
    assert get_metrics(client(None)).status_code == 401
    assert get_metrics(client("worker")).status_code == 403


def test_job_type_labels_are_bounded(settings):
    settings.OJS_METRICS_MAX_TYPES = 0
    proc = metrics.process()
    assert proc.type_label("never.seen.before") == "other"


def test_ready_checks_database_and_migrations(db):
    response = client(None).get("/ready")
    assert response.status_code == 200
    assert response.body == {"status": "ready", "checks": {"database": "ok", "migrations": "ok"}}


def test_worker_serves_its_metrics_on_a_port(settings):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    metrics.serve(port)
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    assert "ojs_jobs_enqueued_total" in body or "ojs_jobs_enqueued" in body
    assert "# TYPE ojs_jobs gauge" in body


# ----------------------------------------------------------------------------- OpenTelemetry


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    previous = trace._TRACER_PROVIDER
    trace._TRACER_PROVIDER = provider
    yield exporter
    trace._TRACER_PROVIDER = previous


def test_enqueue_and_execution_spans_are_linked_across_the_queue(settings, spans):
    settings.OJS_ENQUEUE_MIDDLEWARE = ["django_ojs.otel.OpenTelemetryMiddleware"]
    settings.OJS_EXECUTION_MIDDLEWARE = ["django_ojs.otel.OpenTelemetryMiddleware"]
    tracer = trace.get_tracer("shop")
    with tracer.start_as_current_span("POST /checkout") as request_span:
        job = django_ojs.enqueue("o.charge", queue="ot")
    assert job.meta["traceparent"].split("-")[1] == format(
        request_span.get_span_context().trace_id, "032x"
    )
    (claimed,) = lifecycle.fetch(["ot"], worker_id="w")
    seen = {}

    def handler(ctx):
        seen["span"] = trace.get_current_span()
        seen["ctx_trace"] = ctx.trace
        return "charged"

    assert run(claimed, handler, with_ctx=True).ok
    django_ojs.enqueue("o.fail", queue="ot")
    (claimed2,) = lifecycle.fetch(["ot"], worker_id="w")
    assert not run(claimed2, lambda: 1 / 0).ok
    finished = {
        f"{span.name}:{span.attributes.get('messaging.message.id')}": span
        for span in spans.get_finished_spans()
    }
    publish = finished[f"ot publish:{job.id}"]
    process = finished[f"ot process:{job.id}"]
    outer = next(s for s in spans.get_finished_spans() if s.name == "POST /checkout")
    assert publish.kind == SpanKind.PRODUCER and process.kind == SpanKind.CONSUMER
    assert publish.parent.span_id == outer.context.span_id
    assert process.parent.span_id == publish.context.span_id
    assert process.context.trace_id == outer.context.trace_id
    assert process.attributes["ojs.job.type"] == "o.charge"
    assert seen["span"].get_span_context().span_id == process.context.span_id
    assert seen["ctx_trace"].trace_id == format(outer.context.trace_id, "032x")
    failed = finished[f"ot process:{claimed2.id}"]
    assert failed.status.status_code == StatusCode.ERROR
    assert failed.events[0].name == "exception"
