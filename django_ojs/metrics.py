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

Tenants (multi-tenancy §11.2) have families of their own, ``ojs_tenant_*`` with a
``tenant_id`` label, so that the families above keep their labels and a site without
tenants sees no new series: only jobs with a tenant are counted in them. At most
``OJS_METRICS_MAX_TENANTS`` (1,000, §15.4) tenants per family are named; the others are
summed as ``_other`` (the gauges keep the largest, the counters the first seen). Their
store gauges read a bounded amount however many jobs wait: see :data:`TENANT_EXACT_ROWS`.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Min
from django.utils import timezone

from django_ojs import counters, states
from django_ojs.conf import settings
from django_ojs.envelope import JobSpec, parse_timestamp
from django_ojs.exceptions import OJSError
from django_ojs.tenancy import tenant_of

try:
    import prometheus_client
    from prometheus_client.core import GaugeMetricFamily
    from prometheus_client.registry import Collector
except ImportError:  # pragma: no cover - the extra is not installed
    prometheus_client = None  # type: ignore[assignment]
    Collector = object  # type: ignore[assignment,misc]

#: The ``tenant_id`` of the tenants beyond ``OJS_METRICS_MAX_TENANTS`` (multi-tenancy
#: §15.4; no tenant id starts with ``_``, so it names no tenant).
OTHER_TENANT = "_other"
#: The per-tenant depth gauge counts up to this many available jobs of tenants exactly
#: (through the partial index of their claims); above, it estimates from a sample of
#: about as many rows' worth of the table (PostgreSQL's TABLESAMPLE, the driver's
#: ``group_counts``), and ``ojs_tenant_metrics_estimated`` says 1.
TENANT_EXACT_ROWS = 50_000
#: The recent dispatches ``ojs_tenant_fairness_share`` and ``ojs_scheduling_dispatch_ratio``
#: read: the last (at most) RECENT_SAMPLE ``job.started`` events of the last RECENT_WINDOW.
RECENT_WINDOW = timedelta(minutes=1)
RECENT_SAMPLE = 1000

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
        recent = self.recent_starts(using, now)
        yield from self.tenant_gauges(using, recent)
        yield from self.scheduling_gauges(using, recent)

    @staticmethod
    def scheduling_gauges(using: str, recent: list[tuple[str, str]]) -> Iterator[Any]:
        """Fair scheduling §11.2's gauges: each queue's share of the recent dispatches,
        and each worker pool's active jobs over its capacity."""
        from django_ojs import lifecycle

        ratio = GaugeMetricFamily(
            "ojs_scheduling_dispatch_ratio",
            f"Each queue's share (0-1) of the recent dispatches (the last {RECENT_SAMPLE} "
            f"job.started events of the last {int(RECENT_WINDOW.total_seconds())} seconds).",
            labels=["queue"],
        )
        counts: dict[str, int] = {}
        for queue, _ in recent:
            counts[queue] = counts.get(queue, 0) + 1
        for queue, n in sorted(counts.items()):
            ratio.add_metric([queue], n / len(recent))
        yield ratio
        utilization = GaugeMetricFamily(
            "ojs_scheduling_pool_utilization",
            "A worker pool's active jobs over its capacity: its concurrency limit, else the "
            "sum of its live workers' concurrency (no sample when it has neither).",
            labels=["pool"],
        )
        for name, active, capacity in lifecycle.pool_loads(using=using):
            if capacity:
                utilization.add_metric([name], active / capacity)
        yield utilization

    @staticmethod
    def recent_starts(using: str, now: datetime) -> list[tuple[str, str]]:
        """(queue, tenant) of the last :data:`RECENT_SAMPLE` dispatches of the last
        :data:`RECENT_WINDOW` (``job.started`` events: stored while ``OJS_STORE_EVENTS`` is
        on), newest first; ``""`` for a job without a tenant. Two indexed reads."""
        from django_ojs.models import Event, Job

        started = list(
            Event.objects.using(using)
            .filter(type="job.started", time__gte=now - RECENT_WINDOW)
            .order_by("-time")
            .values_list("queue", "job_id")[:RECENT_SAMPLE]
        )
        ids = {job_id for _, job_id in started if job_id is not None}
        tenants: dict[Any, str] = {}
        if ids:
            tenants = dict(
                Job.objects.using(using)
                .filter(id__in=list(ids))
                .exclude(tenant="")
                .values_list("id", "tenant")
            )
        return [(queue, tenants.get(job_id, "")) for queue, job_id in started]

    @staticmethod
    def tenant_gauges(using: str, recent: list[tuple[str, str]]) -> Iterator[Any]:
        """Multi-tenancy §11.2's gauges: jobs of tenants only, at most
        ``OJS_METRICS_MAX_TENANTS`` tenants each (the rest as ``_other``)."""
        from django_ojs.drivers import get_driver
        from django_ojs.models import Job

        limit = settings.METRICS_MAX_TENANTS
        tenanted = Job.objects.using(using).exclude(tenant="")
        active = GaugeMetricFamily(
            "ojs_tenant_jobs_active", "Active jobs per tenant and queue (jobs with a tenant).",
            labels=["tenant_id", "queue"],
        )  # fmt: skip
        rows = tenanted.filter(state=states.JobState.ACTIVE).values_list("tenant", "queue")
        counted = rows.annotate(n=Count("id")).order_by()
        for (tenant, queue), n in top_tenants(list(counted), limit).items():
            active.add_metric([tenant, queue], n)
        yield active
        depth = GaugeMetricFamily(
            "ojs_tenant_queue_depth",
            "Available jobs per tenant and queue (jobs with a tenant; estimated above "
            f"{TENANT_EXACT_ROWS} of them, see ojs_tenant_metrics_estimated).",
            labels=["tenant_id", "queue"],
        )
        available = tenanted.filter(state=states.JobState.AVAILABLE)
        found, estimated = get_driver(using).group_counts(
            available, ["tenant", "queue"], TENANT_EXACT_ROWS
        )
        for (tenant, queue), n in top_tenants(found, limit).items():
            depth.add_metric([tenant, queue], n)
        yield depth
        flag = GaugeMetricFamily(
            "ojs_tenant_metrics_estimated",
            "1 when ojs_tenant_queue_depth was estimated from a sample of the job table.",
        )
        flag.add_metric([], 1 if estimated else 0)
        yield flag
        share = GaugeMetricFamily(
            "ojs_tenant_fairness_share",
            "Each tenant's share (0-1) of the recent dispatches of jobs with a tenant "
            f"(the last {RECENT_SAMPLE} job.started events of the last "
            f"{int(RECENT_WINDOW.total_seconds())} seconds).",
            labels=["tenant_id"],
        )
        mine = [(tenant, "", 1) for _, tenant in recent if tenant]
        if mine:
            for (tenant, _), n in top_tenants(mine, limit).items():
                share.add_metric([tenant], n / len(mine))
        yield share


def top_tenants(rows: list[tuple[Any, ...]], limit: int) -> dict[tuple[str, str], float]:
    """``(tenant, queue, n)`` rows as ``{(tenant_id, queue): n}`` with at most ``limit``
    tenants named: those with the most, ties by name; the others summed as ``_other``."""
    totals: dict[str, float] = {}
    for tenant, _, n in rows:
        totals[tenant] = totals.get(tenant, 0) + n
    if len(totals) <= limit:
        kept = set(totals)
    else:
        kept = {t for t, _ in heapq.nsmallest(max(limit, 0), totals.items(), key=_most_first)}
    out: dict[tuple[str, str], float] = {}
    for tenant, queue, n in rows:
        key = (tenant if tenant in kept else OTHER_TENANT, queue)
        out[key] = out.get(key, 0) + n
    return out


def _most_first(item: tuple[str, float]) -> tuple[float, str]:
    return -item[1], item[0]


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
        tenant_labels = ["tenant_id", "queue"]
        self.tenant_enqueued = prometheus_client.Counter(
            "ojs_tenant_jobs_enqueued", "Jobs with a tenant enqueued by this process.",
            tenant_labels, registry=registry,
        )  # fmt: skip
        self.tenant_processed = prometheus_client.Counter(
            "ojs_tenant_jobs_processed", "Attempts of jobs with a tenant that completed.",
            tenant_labels, registry=registry,
        )  # fmt: skip
        self.tenant_failed = prometheus_client.Counter(
            "ojs_tenant_jobs_failed", "Attempts of jobs with a tenant that failed (raised).",
            tenant_labels, registry=registry,
        )  # fmt: skip
        self.dispatch = prometheus_client.Counter(
            "ojs_scheduling_dispatch", "Jobs this process's fetches claimed (fair scheduling "
            "§11.2), by queue and worker pool (empty: a worker in no pool).",
            ["queue", "pool"], registry=registry,
        )  # fmt: skip
        self.starvation = prometheus_client.Counter(
            "ojs_scheduling_starvation_events", "Times this process's pool fetches served a "
            "queue starved for a rotation interval (scheduling.queue_starved).",
            ["queue"], registry=registry,
        )  # fmt: skip
        self._types: set[str] = set()
        self._tenants: set[str] = set()
        self._lock = threading.Lock()

    def tenant_label(self, tenant: str) -> str:
        """``tenant``, or ``_other`` once ``OJS_METRICS_MAX_TENANTS`` others were seen."""
        if tenant in self._tenants:
            return tenant
        with self._lock:
            if len(self._tenants) < settings.METRICS_MAX_TENANTS:
                self._tenants.add(tenant)
                return tenant
        return OTHER_TENANT

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


class _Counts:
    """What ``lifecycle`` reports through ``django_ojs.counters``, counted here."""

    def __init__(self, proc: _Process) -> None:
        self.proc = proc

    def dispatched(self, jobs: Sequence[Any], pool: str, queues: Sequence[str]) -> None:
        """Claimed ``jobs`` in ``ojs_scheduling_dispatch_total`` (fair scheduling §11.2).
        ``queues``: the fetch's, for jobs loaded without theirs."""
        only = queues[0] if len(queues) == 1 else ""
        counts: dict[str, int] = {}
        for job in jobs:
            queue = job.__dict__.get("queue") or only  # never load a deferred field
            counts[queue] = counts.get(queue, 0) + 1
        for queue, n in counts.items():
            self.proc.dispatch.labels(queue, pool).inc(n)

    def starved(self, queue: str) -> None:
        """A ``scheduling.queue_starved`` in ``ojs_scheduling_starvation_events_total``."""
        self.proc.starvation.labels(queue).inc()


def process() -> _Process:
    global _process
    if prometheus_client is None:
        raise MetricsUnavailable()
    if _process is None:
        with _process_lock:
            if _process is None:
                _process = _Process(prometheus_client.REGISTRY)
                # From now on this process counts what lifecycle reports.
                counters.count_with(_Counts(_process))
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
            tenant = tenant_of(out.meta)
            if tenant:
                self.metrics.tenant_enqueued.labels(
                    self.metrics.tenant_label(tenant), out.queue
                ).inc()
        return out  # type: ignore[no-any-return]

    def execute(self, job: Mapping[str, Any], ctx: Any, next: Any) -> Any:
        queue = str(job.get("queue") or "default")
        labels = (queue, self.metrics.type_label(str(job.get("type"))))
        ready = _ready_at(job)
        if ready is not None:
            self.metrics.wait.labels(queue).observe(
                max(0.0, (timezone.now() - ready).total_seconds())
            )
        tenant = tenant_of(job.get("meta"))
        mine = (self.metrics.tenant_label(tenant), queue) if tenant else None
        began = time.perf_counter()
        try:
            result = next()
        except BaseException:
            self.metrics.failed.labels(*labels).inc()
            if mine:
                self.metrics.tenant_failed.labels(*mine).inc()
            raise
        finally:
            self.metrics.duration.labels(*labels).observe(time.perf_counter() - began)
        self.metrics.completed.labels(*labels).inc()
        if mine:
            self.metrics.tenant_processed.labels(*mine).inc()
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
