"""The OJS admin API (``ojs-admin-api.md``) under ``/ojs/v1/admin/``: ``admin`` scope.

Queues (list, detail, pause, resume, purge, config), jobs (search, detail, cancel, retry,
bulk retry/cancel/delete with ``confirm``), workers (list, detail, quiet, deregister a
stale one), statistics (aggregate and history) and the dead letter queue (list, retry,
purge). Every change goes through ``django_ojs.lifecycle``; the search is
``django_ojs.jobquery``, the same filter as the Django admin.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from datetime import timedelta
from typing import Any

from django.db.models import Count, Min
from django.utils import timezone
from rest_framework.response import Response

from django_ojs import envelope, jobquery, lifecycle, queues, validation
from django_ojs.api import queueconfig, serializers
from django_ojs.api.permissions import MANAGE
from django_ojs.api.views import dead_letter
from django_ojs.api.views.base import OJSView, bulk_filter, refuse_unknown, require_confirm
from django_ojs.conf import settings
from django_ojs.exceptions import (
    InvalidRequest,
    InvalidTransition,
    JobNotFound,
    NotFound,
    PermissionDenied,
)
from django_ojs.models import Event, Job, Worker
from django_ojs.states import JobState

_STARTED = time.monotonic()
PER_PAGE, MAX_PER_PAGE = 20, 100
PERIODS = {"1m": 60, "5m": 300, "1h": 3600, "1d": 86400}


#: Query parameters the list endpoints read besides the filter's own.
LIST_PARAMS = ("page", "per_page", "sort", "order", "cursor")


class AdminView(OJSView):
    """An admin API endpoint. A key limited to some queues (security §7.1) sees and changes
    only the jobs of those queues, and may not use the cluster-wide endpoints (statistics
    over every queue, workers, system configuration)."""

    operation = MANAGE
    # Purges are DELETEs with a JSON body ({"confirm": true, ...}, admin API §6.5, §11.3).
    body_methods = ("POST", "PUT", "PATCH", "DELETE")

    #: Whether GET reads from the replica (``OJS_READ_DATABASE``): the list endpoints.
    #: Everything else (one job, a worker, a queue's detail, any change) reads the job
    #: database, where the next action on it will be decided.
    reads_from_replica = False

    def reading(self, request: Any) -> str:
        """The alias this request reads from."""
        if self.reads_from_replica and request.method in ("GET", "HEAD"):
            return lifecycle.read_database()
        return settings.DATABASE

    def jobs(self, request: Any) -> Any:
        """The jobs the caller may see: all of them, or those of its key's queues."""
        allowed = self.queue_filter(request)
        jobs = _jobs(self.reading(request))
        jobs = jobs if allowed is None else jobs.filter(allowed)
        tenants = self.tenant_filter(request)
        return jobs if tenants is None else jobs.filter(tenants)

    def require_every_queue(self, request: Any) -> None:
        """403 for a key limited to some queues, or to some tenants: this endpoint spans
        every queue and every tenant."""
        who = self.principal(request)
        who.require_every_tenant()
        if who.queues is not None:
            raise PermissionDenied(
                f"Principal '{who.name}' is limited to some queues; this admin endpoint "
                "spans every queue.",
                details={"principal": who.name, "allowed_queues": list(who.queues)},
            )


def _jobs(using: str | None = None) -> Any:
    return Job.objects.using(using or settings.DATABASE)


def _page(params: Any) -> tuple[int, int]:
    def number(name: str, default: int, maximum: int) -> int:
        raw = params.get(name)
        if raw in (None, ""):
            return default
        try:
            value = int(raw)
        except (TypeError, ValueError):
            raise InvalidRequest(f"{name} must be an integer", details={"field": name}) from None
        if not 1 <= value <= maximum:
            raise InvalidRequest(f"{name} must be between 1 and {maximum}", details={"field": name})
        return value

    return number("page", 1, 10**9), number("per_page", PER_PAGE, MAX_PER_PAGE)


def paginate(items: Any, params: Any, *, keyset: bool = False) -> tuple[list[Any], dict[str, Any]]:
    """One page of ``items``: ``page``/``per_page`` (OFFSET), or ``cursor`` for job lists.

    ``total`` is exact up to ``jobquery.EXACT_COUNT_LIMIT`` rows and PostgreSQL's estimate
    above (then ``"estimated": true``): a list never counts a million rows.
    """
    page, per_page = _page(params)
    if isinstance(items, list):
        total, estimated = len(items), False
    else:
        total, estimated = jobquery.count(items)
    meta: dict[str, Any] = {"total": total, "page": page, "per_page": per_page}
    if estimated:
        meta["estimated"] = True
    if keyset and "cursor" in params:
        # Keyset pagination (newest first), for deep pages: no OFFSET to read through.
        if any(params.get(name) for name in ("page", "sort", "order")):
            raise InvalidRequest(
                "cursor cannot be combined with page, sort or order", details={"field": "cursor"}
            )
        chunk = list(jobquery.after_cursor(items, params.get("cursor"))[: per_page + 1])
        more = len(chunk) > per_page
        chunk = chunk[:per_page]
        del meta["page"]
        meta["next_cursor"] = str(chunk[-1].id) if more else None
        return chunk, meta
    chunk = list(items[(page - 1) * per_page : page * per_page])
    return chunk, meta


def job_summary(job: Job) -> dict[str, Any]:
    ts = envelope.format_timestamp
    out = {
        "id": str(job.id), "type": job.type, "queue": job.queue, "state": job.state,
        "priority": job.priority, "attempt": job.attempt, "created_at": ts(job.created_at),
    }  # fmt: skip
    if job.tenant:
        out["tenant_id"] = job.tenant
    for name in ("scheduled_at", "started_at", "completed_at", "discarded_at", "cancelled_at"):
        value = getattr(job, name)
        if value is not None:
            out[name] = ts(value)
    if job.error:
        out["error"] = {k: job.error.get(k) for k in ("type", "message") if k in job.error}
    return out


def _detail(job: Job) -> dict[str, Any]:
    wire = serializers.job(job)
    wire["retry_policy"] = wire.get("retry")
    wire["metadata"] = {
        name: envelope.format_timestamp(getattr(job, name))
        for name in ("created_at", "enqueued_at", "started_at", "scheduled_at", "completed_at",
                     "cancelled_at", "discarded_at")
    }  # fmt: skip
    return wire


def _throughput(queue: str | None = None, using: str | None = None) -> dict[str, float]:
    since = timezone.now() - timedelta(minutes=5)
    events = Event.objects.using(using or settings.DATABASE).filter(
        time__gte=since, type__in=["job.completed", "job.failed", "job.discarded"]
    )
    if queue:
        events = events.filter(queue=queue)
    counts = Counter(events.values_list("type", flat=True))
    return {
        "processed_per_minute": round(counts["job.completed"] / 5, 2),
        "failed_per_minute": round((counts["job.failed"] + counts["job.discarded"]) / 5, 2),
    }


def _queue(
    info: queues.QueueInfo, *, detail: bool = False, using: str | None = None
) -> dict[str, Any]:
    out = serializers.queue(info)
    out.update(
        {
            "name": info.name,
            "state": "paused" if info.paused else "active",
            "counts": dict(info.counts),
            "paused": info.paused,
            "created_at": envelope.format_timestamp(info.created_at),
            "throughput": _throughput(info.name, using),
        }
    )
    if detail:
        oldest = (
            _jobs()
            .filter(queue=info.name, state=JobState.AVAILABLE)
            .aggregate(first=Min("enqueued_at"))["first"]
        )
        out["oldest_available_at"] = envelope.format_timestamp(oldest)
        out["configuration"] = queueconfig.configuration(info)
    return out


# ---------------------------------------------------------------------- statistics


class StatsView(AdminView):
    """``GET /admin/stats`` (§10.1)."""

    reads_from_replica = True

    def get(self, request: Any) -> Response:
        self.require_every_queue(request)
        using = self.reading(request)
        counts = {s.value: 0 for s in JobState}
        for state, n in _jobs(using).values_list("state").annotate(n=Count("id")).order_by():
            counts[state] = n
        return Response(
            {
                "queues": len(queues.list_queues(using=using)),
                "workers": Worker.objects.using(using).count(),
                "jobs": counts,
                "throughput": _throughput(using=using),
                "uptime_seconds": round(time.monotonic() - _STARTED),
            }
        )


class StatsHistoryView(AdminView):
    """``GET /admin/stats/history?period=5m&since=&until=&queue=`` (§10.2), from events."""

    reads_from_replica = True

    def get(self, request: Any) -> Response:
        params = request.query_params
        period = params.get("period") or "5m"
        if period not in PERIODS:
            raise InvalidRequest(
                f"period must be one of {', '.join(PERIODS)}", details={"field": "period"}
            )
        now = timezone.now()
        since = (
            envelope.parse_timestamp(params["since"], "since")
            if params.get("since")
            else (now - timedelta(hours=1))
        )
        until = envelope.parse_timestamp(params["until"], "until") if params.get("until") else now
        step = PERIODS[period]
        if (until - since).total_seconds() / step > 2000:
            raise InvalidRequest(
                "The range holds more than 2000 periods", details={"field": "since"}
            )
        events = Event.objects.using(self.reading(request)).filter(
            time__gte=since, time__lt=until,
            type__in=["job.enqueued", "job.completed", "job.failed", "job.discarded"],
        )  # fmt: skip
        if params.get("queue"):
            queue = validation.validate_queue(params["queue"])
            self.require_queue(request, queue, MANAGE)
            events = events.filter(queue=queue)
        else:
            self.require_every_queue(request)
        buckets: dict[int, Counter[str]] = {}
        for kind, when in events.values_list("type", "time").iterator(chunk_size=5000):
            slot = int((when - since).total_seconds() // step)
            buckets.setdefault(slot, Counter())[kind] += 1
        data = []
        for slot in range(int((until - since).total_seconds() // step) + 1):
            counts = buckets.get(slot, Counter())
            data.append(
                {
                    "timestamp": envelope.format_timestamp(since + timedelta(seconds=slot * step)),
                    "processed": counts["job.completed"],
                    "failed": counts["job.failed"] + counts["job.discarded"],
                    "enqueued": counts["job.enqueued"],
                }
            )
        return Response({"period": period, "data": data})


# ---------------------------------------------------------------------- queues


class QueuesView(AdminView):
    """``GET /admin/queues`` (§6.1)."""

    reads_from_replica = True

    def get(self, request: Any) -> Response:
        who = self.principal(request)
        using = self.reading(request)
        listed = queues.list_queues(with_counts=True, using=using)
        every = [i for i in listed if who.may_use(i.name)]
        items, page = paginate(every, request.query_params)
        return Response({"items": [_queue(i, using=using) for i in items], "pagination": page})


class QueueView(AdminView):
    """``GET /admin/queues/{name}`` (§6.2)."""

    def get(self, request: Any, name: str) -> Response:
        name = validation.validate_queue(name)
        self.require_queue(request, name, MANAGE)
        found = [i for i in queues.list_queues(with_counts=False) if i.name == name]
        if not found and not _jobs().filter(queue=name).exists():
            raise NotFound(f"Queue '{name}' not found.")
        info = found[0] if found else queues.QueueInfo(name)
        info.counts = queues.counts(name)
        return Response(_queue(info, detail=True))


class QueuePauseView(AdminView):
    """``POST /admin/queues/{name}/pause`` and ``/resume`` (§6.3, §6.4)."""

    paused = True

    def post(self, request: Any, name: str) -> Response:
        name = validation.validate_queue(name)
        self.require_queue(request, name, MANAGE)
        actor = self.actor(request)
        if self.paused:
            queues.pause(name, actor=actor)
        else:
            queues.resume(name, actor=actor)
        info = next(i for i in queues.list_queues() if i.name == name)
        return Response(
            {
                "name": name,
                "paused": info.paused,
                "paused_at": envelope.format_timestamp(info.paused_at),
            }
        )


class QueueResumeView(QueuePauseView):
    paused = False


class QueueJobsView(AdminView):
    """``DELETE /admin/queues/{name}/jobs`` ``{states, older_than?, confirm}`` (§6.5)."""

    def delete(self, request: Any, name: str) -> Response:
        name = validation.validate_queue(name)
        self.require_queue(request, name, MANAGE)
        body = self.body(request)
        require_confirm(body)
        refuse_unknown(body, {"confirm", "states", "older_than"})
        wanted = body.get("states")
        if not isinstance(wanted, list) or not wanted:
            raise InvalidRequest("states must be a non-empty array", details={"field": "states"})
        bad = [s for s in wanted if not isinstance(s, str) or s not in {t.value for t in JobState}]
        if bad:
            raise InvalidRequest(f"Unknown state '{bad[0]}'", details={"field": "states"})
        live = [s for s in wanted if s not in {"completed", "discarded", "cancelled"}]
        if live:
            raise InvalidRequest(
                f"Only finished jobs can be purged, not '{live[0]}' (cancel them first).",
                details={"field": "states"},
            )
        params = {"queue": name, "state": wanted}
        if body.get("older_than"):
            params["finished_before"] = body["older_than"]
        jobs = jobquery.JobFilter.parse(params).apply(self.jobs(request))
        out = lifecycle.bulk("delete", jobs, actor=self.actor(request))
        return Response({"purged_count": out["succeeded"], "states": wanted})


# ---------------------------------------------------------------------- jobs


class JobsView(AdminView):
    """``GET /admin/jobs`` with the filters of ``jobquery`` (§7.1)."""

    reads_from_replica = True

    def get(self, request: Any) -> Response:
        params = request.query_params
        jobs = jobquery.JobFilter.parse(params, extra=LIST_PARAMS).apply(self.jobs(request))
        jobs = jobquery.order(jobs, params)
        items, page = paginate(jobs, params, keyset=True)
        return Response({"items": [job_summary(j) for j in items], "pagination": page})


def _job(job_id: str) -> Job:
    found: Job | None = _jobs().filter(pk=_uuid(job_id)).first()
    if found is None:
        raise JobNotFound(job_id)
    return found


def _uuid(job_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(job_id)
    except ValueError:
        raise JobNotFound(job_id) from None


class JobView(AdminView):
    """``GET /admin/jobs/{id}`` (§7.2)."""

    def get(self, request: Any, job_id: str) -> Response:
        self.require_job_queue(request, job_id, MANAGE)
        return Response(_detail(_job(job_id)))


class JobCancelView(AdminView):
    """``POST /admin/jobs/{id}/cancel`` (§7.3)."""

    def post(self, request: Any, job_id: str) -> Response:
        self.body(request)
        self.require_job_queue(request, job_id, MANAGE)
        job = lifecycle.cancel(job_id, reason="admin API", actor=self.actor(request))
        return Response(_detail(job))


class JobRetryView(AdminView):
    """``POST /admin/jobs/{id}/retry`` (§7.4): a discarded job back to ``available``."""

    def post(self, request: Any, job_id: str) -> Response:
        self.body(request)
        self.require_job_queue(request, job_id, MANAGE)
        job = _job(job_id)
        if job.state != JobState.DISCARDED:
            raise InvalidTransition(
                job.id, job.state, "retry", {"discarded"},
                message=f"Job '{job.id}' is {job.state}: only discarded jobs can be retried "
                "(a cancelled job is final).",
            )  # fmt: skip
        return Response(_detail(lifecycle.retry_discarded(job.id, actor=self.actor(request))))


class JobsBulkView(AdminView):
    """``POST /admin/jobs/bulk/{retry|cancel|delete}`` ``{filter, confirm}`` (§8)."""

    def post(self, request: Any, action: str) -> Response:
        if action not in lifecycle.BULK_ACTIONS:
            raise NotFound(f"Unknown bulk action '{action}'.")
        query = bulk_filter(self.body(request))
        if query.empty and action == "delete":
            raise InvalidRequest(
                "A bulk delete needs a filter (an empty one would match every job).",
                details={"field": "filter"},
            )
        jobs = query.apply(self.jobs(request))
        return Response(lifecycle.bulk(action, jobs, actor=self.actor(request)))


# ---------------------------------------------------------------------- workers


def _worker(worker: Worker, *, stale_before: Any) -> dict[str, Any]:
    ts = envelope.format_timestamp
    stale = worker.last_heartbeat_at < stale_before
    return {
        "id": worker.id, "hostname": worker.hostname, "pid": worker.pid,
        "state": "stale" if stale else (worker.directive or worker.state),
        "queues": worker.queues, "concurrency": worker.concurrency,
        "active_jobs": len(worker.active_job_ids or []),
        "active_job_ids": [str(i) for i in worker.active_job_ids or []],
        "labels": worker.labels, "started_at": ts(worker.started_at),
        "last_heartbeat_at": ts(worker.last_heartbeat_at),
    }  # fmt: skip


def _stale_before() -> Any:
    return timezone.now() - timedelta(seconds=settings.WORKER_STALE_AFTER)


class WorkersView(AdminView):
    """``GET /admin/workers`` (§9.1)."""

    reads_from_replica = True

    def get(self, request: Any) -> Response:
        self.require_every_queue(request)
        stale = _stale_before()
        workers = Worker.objects.using(self.reading(request)).order_by("id")
        items, page = paginate(workers, request.query_params)
        every = [_worker(w, stale_before=stale) for w in workers]
        summary = Counter(w["state"] for w in every)
        return Response(
            {
                "items": [_worker(w, stale_before=stale) for w in items],
                "summary": {"total": len(every), "running": 0, "quiet": 0, "stale": 0, **summary},
                "pagination": page,
            }
        )


def _found_worker(worker_id: str) -> Worker:
    worker = Worker.objects.using(settings.DATABASE).filter(pk=worker_id).first()
    if worker is None:
        raise NotFound(f"Worker '{worker_id}' not found.")
    return worker


class WorkerView(AdminView):
    """``GET /admin/workers/{id}`` (§9.2) and ``DELETE`` (§9.4: a stale one only)."""

    def get(self, request: Any, worker_id: str) -> Response:
        self.require_every_queue(request)
        worker = _found_worker(worker_id)
        out = _worker(worker, stale_before=_stale_before())
        jobs = _jobs().filter(worker_id=worker.id, state=JobState.ACTIVE)[:MAX_PER_PAGE]
        out["jobs"] = [job_summary(j) for j in jobs]
        return Response(out)

    def delete(self, request: Any, worker_id: str) -> Response:
        self.require_every_queue(request)
        worker = _found_worker(worker_id)
        if worker.last_heartbeat_at >= _stale_before():
            raise InvalidTransition(
                worker.id, "running", "deregister", {"stale"},
                message=f"Worker '{worker.id}' is still sending heartbeats: quiet or stop it.",
            )  # fmt: skip
        recovered = lifecycle.recover_dead_workers(worker_ids=[worker.id])
        return Response({"id": worker.id, "deregistered": True, "jobs_recovered": recovered})


class WorkerQuietView(AdminView):
    """``POST /admin/workers/{id}/quiet`` (§9.3): delivered in its next heartbeat reply."""

    def post(self, request: Any, worker_id: str) -> Response:
        self.body(request)
        self.require_every_queue(request)
        _found_worker(worker_id)
        worker = lifecycle.set_directive(worker_id, "quiet", actor=self.actor(request))
        return Response(_worker(worker, stale_before=_stale_before()))


# ---------------------------------------------------------------------- dead letter


class DeadLetterView(AdminView):
    """``GET /admin/dead-letter`` (§11.1) and ``DELETE`` ``{older_than?, confirm}`` (§11.3)."""

    reads_from_replica = True  # the GET list; the DELETE reads the job database

    def get(self, request: Any) -> Response:
        params = request.query_params
        jobs = jobquery.JobFilter.parse(params, extra=LIST_PARAMS).apply(
            self.jobs(request).dead_letter()
        )
        jobs = jobquery.order(jobs, params)
        items, page = paginate(jobs, params, keyset=True)
        return Response({"items": [job_summary(j) for j in items], "pagination": page})

    def delete(self, request: Any) -> Response:
        body = self.body(request)
        require_confirm(body)
        refuse_unknown(body, {"confirm", "queue", "type", "older_than"})
        params: dict[str, Any] = {k: v for k, v in body.items() if k in {"queue", "type"}}
        if body.get("older_than"):
            params["finished_before"] = body["older_than"]
        jobs = jobquery.JobFilter.parse(params).apply(self.jobs(request).dead_letter())
        out = lifecycle.bulk("delete", jobs, actor=self.actor(request))
        return Response({"purged_count": out["succeeded"]})


class DeadLetterStatsView(AdminView):
    """``GET /admin/dead-letter/stats``: the dead-letter extension's statistics (§10.1)."""

    reads_from_replica = True

    def get(self, request: Any) -> Response:
        return Response(dead_letter.stats(self.jobs(request).dead_letter()))


class DeadLetterJobView(AdminView):
    """``GET`` / ``DELETE /admin/dead-letter/{id}``: one dead-lettered job (§3 resources)."""

    def get(self, request: Any, job_id: str) -> Response:
        self.require_job_queue(request, job_id, MANAGE)
        return Response(_detail(dead_letter.dead_job(self.jobs(request).dead_letter(), job_id)))

    def delete(self, request: Any, job_id: str) -> Response:
        self.require_job_queue(request, job_id, MANAGE)
        lifecycle.delete_discarded(job_id, actor=self.actor(request))
        return Response(status=204)  # ext-dead-letter suite; the spec names no status


class DeadLetterBulkRetryView(AdminView):
    """``POST /admin/dead-letter/retry`` ``{filter?, confirm}``: retry every dead-lettered
    job the filter matches (OpenAPI ``adminBulkRetryDeadLetter``; the official admin UI's
    "retry all")."""

    def post(self, request: Any) -> Response:
        return Response(dead_letter.retry_matching(self, request, self.jobs(request)))


class DeadLetterRetryView(AdminView):
    """``POST /admin/dead-letter/{id}/retry`` (§11.2)."""

    def post(self, request: Any, job_id: str) -> Response:
        self.body(request)
        self.require_job_queue(request, job_id, MANAGE)
        return Response(_detail(lifecycle.retry_discarded(job_id, actor=self.actor(request))))
