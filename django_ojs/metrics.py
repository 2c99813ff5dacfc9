"""Prometheus metrics (OJS observability §4), with ``prometheus-client`` (extra ``metrics``).

Two kinds, because a job system runs in several processes:

* **State of the store**, read from the database when scraped, the same from any process:
  jobs per queue and state (the unfinished states, and the dead letter queue), workers
  per state, paused queues, and the age of the oldest available job per queue.
* **What this process did**, counted by :class:`MetricsMiddleware` on both middleware
  chains: jobs enqueued, attempts completed and failed, attempt duration and wait time
  (enqueue → start) histograms. A web process counts its pushes, a worker its attempts:
  each worker serves its own with ``ojs_worker --metrics-port``.

Label sets are bounded: ``queue`` (the operator's queues) and ``job_type``, of which at
most ``OJS_METRICS_MAX_TYPES`` (100) distinct values are kept per process; the others are
counted as ``other``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

from django.db.models import Count, Min
from django.utils import timezone

from django_ojs import states
from django_ojs.conf import settings
from django_ojs.envelope import JobSpec, parse_timestamp
from django_ojs.exceptions import OJSError

try:
    import prometheus_client
    from prometheus_client.core import GaugeMetricFamily
    from prometheus_client.registry import Collector
except ImportError:  # pragma: no cover - the extra is not installed
    prometheus_client = None  # type: ignore[assignment]
    Collector = object  # type: ignore[assignment,misc]

#: Seconds: what a job system's jobs take, from a no-op to a long report.
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900)


class MetricsUnavailable(OJSError):
    """prometheus-client is not installed (``pip install django-ojs[metrics]``)."""

    code = "unsupported"
    http_status = 501


def available() -> bool:
    return prometheus_client is not None


class StoreCollector(Collector):
    """Gauges read from the job store at scrape time (indexed queries only)."""

    def __init__(self, using: str | None = None) -> None:
        self.using = using

    def collect(self) -> Iterator[Any]:
        from django_ojs import lifecycle
        from django_ojs.models import Job, Queue, Worker

        # Gauges are for looking at: from the replica when there is one (OJS_READ_DATABASE).
        using = self.using or lifecycle.read_database()
        if self.using is None and settings.READ_DATABASE:
            status = lifecycle.replica_status()
            lag = GaugeMetricFamily(
                "ojs_read_database_lag_seconds",
                "How far the database these gauges are read from (OJS_READ_DATABASE) is "
                "behind the primary (0: up to date or not a replica; NaN: unknown).",
                labels=["database"],
            )
            lag.add_metric([status.alias], float("nan") if status.lag is None else status.lag)
            yield lag
        jobs = GaugeMetricFamily(
            "ojs_jobs", "Jobs in the store by queue and state (unfinished states).",
            labels=["queue", "state"],
        )  # fmt: skip
        unfinished = (
            Job.objects.using(using)
            .filter(state__in=states.NON_TERMINAL_STATES)
            .values_list("queue", "state")
            .annotate(n=Count("id"))
        )
        for queue, state, n in unfinished:
            jobs.add_metric([queue, state], n)
        yield jobs
        dead = GaugeMetricFamily(
            "ojs_dead_letter_jobs", "Jobs in the dead letter queue.", labels=["queue"]
        )
        for queue, n in (
            Job.objects.using(using)
            .filter(state=states.JobState.DISCARDED, dead_letter=True)
            .values_list("queue")
            .annotate(n=Count("id"))
        ):
            dead.add_metric([queue], n)
        yield dead
        oldest = GaugeMetricFamily(
            "ojs_queue_oldest_available_age_seconds",
            "Age of the oldest available job per queue (how far behind the workers are).",
            labels=["queue"],
        )
        now = timezone.now()
        for queue, first in (
            Job.objects.using(using)
            .filter(state=states.JobState.AVAILABLE)
            .values_list("queue")
            .annotate(first=Min("enqueued_at"))
        ):
            if first is not None:
                oldest.add_metric([queue], max(0.0, (now - first).total_seconds()))
        yield oldest
        paused = GaugeMetricFamily(
            "ojs_queue_paused", "1 when the queue is paused.", labels=["queue"]
        )
        for name, is_paused in Queue.objects.using(using).values_list("name", "paused"):
            paused.add_metric([name], 1 if is_paused else 0)
        yield paused
        workers = GaugeMetricFamily("ojs_workers", "Registered workers by state.", labels=["state"])
        for state, n in Worker.objects.using(using).values_list("state").annotate(n=Count("id")):
            workers.add_metric([state], n)
        yield workers


class _Process:
    """The counters and histograms of this process (created once, on first use)."""

    def __init__(self, registry: Any) -> None:
        labels = ["queue", "job_type"]
        self.enqueued = prometheus_client.Counter(
            "ojs_jobs_enqueued", "Jobs enqueued by this process.", labels, registry=registry
        )
        self.completed = prometheus_client.Counter(
            "ojs_jobs_completed", "Attempts that completed.", labels, registry=registry
        )
        self.failed = prometheus_client.Counter(
            "ojs_jobs_failed", "Attempts that failed (raised).", labels, registry=registry
        )
        self.duration = prometheus_client.Histogram(
            "ojs_job_duration_seconds", "Attempt run time, handler and middleware.", labels,
            buckets=DURATION_BUCKETS, registry=registry,
        )  # fmt: skip
        self.wait = prometheus_client.Histogram(
            "ojs_job_wait_seconds", "Time from enqueue (or schedule) to the attempt's start.",
            ["queue"], buckets=DURATION_BUCKETS, registry=registry,
        )  # fmt: skip
        self._types: set[str] = set()
        self._lock = threading.Lock()

    def type_label(self, job_type: str) -> str:
        if job_type in self._types:
            return job_type
        with self._lock:
            if len(self._types) < settings.METRICS_MAX_TYPES:
                self._types.add(job_type)
                return job_type
        return "other"


_process: _Process | None = None
_process_lock = threading.Lock()
_store_registered = False


def registry() -> Any:
    """The registry ``/ojs/metrics`` and ``ojs_worker --metrics-port`` serve: the default
    one of prometheus-client (so your own metrics appear too), with the store's gauges."""
    global _store_registered
    if prometheus_client is None:
        raise MetricsUnavailable()
    process()
    with _process_lock:
        if not _store_registered:
            prometheus_client.REGISTRY.register(StoreCollector())
            _store_registered = True
    return prometheus_client.REGISTRY


def process() -> _Process:
    global _process
    if prometheus_client is None:
        raise MetricsUnavailable()
    if _process is None:
        with _process_lock:
            if _process is None:
                _process = _Process(prometheus_client.REGISTRY)
    return _process


def render() -> tuple[bytes, str]:
    """The metrics in the Prometheus text format, and its content type."""
    return prometheus_client.generate_latest(registry()), prometheus_client.CONTENT_TYPE_LATEST


def serve(port: int, addr: str = "127.0.0.1") -> None:
    """Serve this process's metrics on ``addr:port`` from a background thread."""
    prometheus_client.start_http_server(port, addr=addr, registry=registry())


class MetricsMiddleware:
    """Counts pushes and attempts (observability §4, middleware §8.1.2), on both chains.

    Add it to ``OJS_ENQUEUE_MIDDLEWARE`` and ``OJS_EXECUTION_MIDDLEWARE``; without
    prometheus-client installed it raises at the first job instead of counting nothing.
    """

    def __init__(self) -> None:
        self.metrics = process()

    def __call__(self, job: Any, *rest: Any) -> Any:
        if len(rest) == 1:
            return self.enqueue(job, rest[0])
        return self.execute(job, rest[0], rest[1])

    def enqueue(self, job: JobSpec, next: Any) -> JobSpec | None:
        out = next(job)
        if out is not None:
            self.metrics.enqueued.labels(out.queue, self.metrics.type_label(out.type)).inc()
        return out  # type: ignore[no-any-return]

    def execute(self, job: Mapping[str, Any], ctx: Any, next: Any) -> Any:
        queue = str(job.get("queue") or "default")
        labels = (queue, self.metrics.type_label(str(job.get("type"))))
        ready = _ready_at(job)
        if ready is not None:
            self.metrics.wait.labels(queue).observe(
                max(0.0, (timezone.now() - ready).total_seconds())
            )
        began = time.perf_counter()
        try:
            result = next()
        except BaseException:
            self.metrics.failed.labels(*labels).inc()
            raise
        finally:
            self.metrics.duration.labels(*labels).observe(time.perf_counter() - began)
        self.metrics.completed.labels(*labels).inc()
        return result


def _ready_at(job: Mapping[str, Any]) -> datetime | None:
    """When the job became runnable: its schedule if later than its enqueue."""
    times = []
    for key in ("enqueued_at", "scheduled_at"):
        value = job.get(key)
        if isinstance(value, str):
            try:
                times.append(parse_timestamp(value, key))
            except OJSError:
                continue
    return max(times) if times else None
