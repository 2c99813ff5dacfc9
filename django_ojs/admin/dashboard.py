"""The operator dashboard: counts by state per queue, what needs attention, and charts.

Read-only, but for the maintenance mode switch (admin API §12.1), which calls
``lifecycle.set_maintenance``. The per-minute charts count ``job.completed`` / ``job.failed`` /
``job.retrying`` events; when events are not stored (``OJS_STORE_EVENTS = False``) they
fall back to the finish times of the jobs still stored, and the page says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Min
from django.db.models.functions import TruncMinute
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone

from django_ojs import lifecycle
from django_ojs import queues as queue_ops
from django_ojs.admin import charts, display
from django_ojs.admin.base import ReadOnlyAdmin, admin_actor, read_alias, replica_context
from django_ojs.admin.workers import stale_before
from django_ojs.conf import settings
from django_ojs.exceptions import OJSError
from django_ojs.models import Dashboard, Event, Job, Worker
from django_ojs.states import JobState

WINDOW_MINUTES = 60
#: Event type → chart series.
SERIES_EVENTS = {"job.completed": "completed", "job.failed": "failed", "job.retrying": "retried"}
SERIES = ("completed", "failed", "retried")
#: Queues drawn in the throughput chart (the busiest first).
THROUGHPUT_QUEUES = 20
#: Completed jobs read for the wait and run time percentiles: the newest of the window.
TIMING_SAMPLE = 20_000


def window(now: datetime) -> list[datetime]:
    """The start of each of the last ``WINDOW_MINUTES`` minutes, the current one last."""
    current = now.astimezone(UTC).replace(second=0, microsecond=0)
    return [current - timedelta(minutes=WINDOW_MINUTES - 1 - i) for i in range(WINDOW_MINUTES)]


def per_minute(minutes: list[datetime], using: str | None = None) -> dict[str, list[int]]:
    """Completed, failed and retried per minute, counted from stored events."""
    rows = (
        Event.objects.using(using)
        .filter(time__gte=minutes[0], type__in=list(SERIES_EVENTS))
        .annotate(minute=TruncMinute("time", tzinfo=UTC))
        .values("minute", "type")
        .annotate(n=Count("seq"))
        .order_by()
    )
    index = {m: i for i, m in enumerate(minutes)}
    out = {name: [0] * len(minutes) for name in SERIES}
    for row in rows:
        slot = index.get(row["minute"].astimezone(UTC))
        if slot is not None:
            out[SERIES_EVENTS[row["type"]]][slot] += row["n"]
    return out


def per_minute_from_jobs(minutes: list[datetime], using: str | None = None) -> dict[str, list[int]]:
    """Without events: completions and final failures from the jobs' own timestamps."""
    out = {name: [0] * len(minutes) for name in SERIES}
    index = {m: i for i, m in enumerate(minutes)}
    for name, state, field in (
        ("completed", JobState.COMPLETED, "completed_at"),
        ("failed", JobState.DISCARDED, "discarded_at"),
    ):
        rows = (
            Job.objects.using(using)
            .filter(state=state, **{f"{field}__gte": minutes[0]})
            .annotate(minute=TruncMinute(field, tzinfo=UTC))
            .values("minute")
            .annotate(n=Count("*"))
            .order_by()
        )
        for row in rows:
            slot = index.get(row["minute"].astimezone(UTC))
            if slot is not None:
                out[name][slot] += row["n"]
    return out


def throughput_by_queue(
    since: datetime, *, from_events: bool, using: str | None = None
) -> list[tuple[str, dict[str, int]]]:
    """Jobs completed and failed per queue since ``since``, busiest first."""
    totals: dict[str, dict[str, int]] = {}
    if from_events:
        rows = (
            Event.objects.using(using)
            .filter(time__gte=since, type__in=["job.completed", "job.failed"])
            .values("queue", "type")
            .annotate(n=Count("seq"))
            .order_by()
        )
        for row in rows:
            name = SERIES_EVENTS[row["type"]]
            totals.setdefault(row["queue"], {"completed": 0, "failed": 0})[name] += row["n"]
    else:
        for name, state, field in (
            ("completed", JobState.COMPLETED, "completed_at"),
            ("failed", JobState.DISCARDED, "discarded_at"),
        ):
            job_rows = (
                Job.objects.using(using)
                .filter(state=state, **{f"{field}__gte": since})
                .values("queue")
                .annotate(n=Count("*"))
                .order_by()
            )
            for job_row in job_rows:
                counts = totals.setdefault(job_row["queue"], {"completed": 0, "failed": 0})
                counts[name] += job_row["n"]
    ranked = sorted(totals.items(), key=lambda item: (-sum(item[1].values()), item[0]))
    return ranked[:THROUGHPUT_QUEUES]


def percentile(ordered: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of an ascending, non-empty sequence."""
    rank = max(math.ceil(fraction * len(ordered)), 1)
    return ordered[rank - 1]


@dataclass
class Timings:
    """Wait (enqueued → started) and run (started → completed) time percentiles per queue."""

    wait: list[tuple[str, dict[str, float]]]
    run: list[tuple[str, dict[str, float]]]
    jobs: int
    sampled: bool  # True when more jobs completed than :data:`TIMING_SAMPLE`


def timings(since: datetime, using: str | None = None) -> Timings:
    """Percentiles over the jobs completed since ``since``, in milliseconds, busiest first.

    Reads at most the newest ``TIMING_SAMPLE`` of them through the index of completed jobs
    by ``completed_at``, so the page costs the same at any volume; the page says when it
    sampled.
    """
    rows = list(
        Job.objects.using(using)
        .filter(state=JobState.COMPLETED, completed_at__gte=since)
        .order_by("-completed_at")
        .values_list("queue", "enqueued_at", "started_at", "completed_at")[: TIMING_SAMPLE + 1]
    )
    sampled = len(rows) > TIMING_SAMPLE
    waits: dict[str, list[float]] = {}
    runs: dict[str, list[float]] = {}
    for queue, enqueued, started, completed in rows[:TIMING_SAMPLE]:
        if started is None or completed is None:
            continue
        if enqueued is not None:
            waits.setdefault(queue, []).append(max((started - enqueued).total_seconds(), 0) * 1000)
        runs.setdefault(queue, []).append(max((completed - started).total_seconds(), 0) * 1000)

    def table(values: dict[str, list[float]]) -> list[tuple[str, dict[str, float]]]:
        out = []
        for queue, samples in sorted(values.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            samples.sort()
            out.append((queue, {"p50": percentile(samples, 0.50), "p95": percentile(samples, 0.95),
                                "p99": percentile(samples, 0.99), "n": len(samples)}))  # fmt: skip
        return out[:THROUGHPUT_QUEUES]

    return Timings(table(waits), table(runs), min(len(rows), TIMING_SAMPLE), sampled)


def timing_charts(timing: Timings) -> list[tuple[str, charts.BarChart, list[Any], str]]:
    """``(title, chart, rows, element id)`` for the wait and run time charts that have data."""
    return [
        (title, charts.percentile_chart(rows), rows, chart_id)
        for title, rows, chart_id in (
            ("Wait time", timing.wait, "ojs-wait-chart"),
            ("Run time", timing.run, "ojs-run-chart"),
        )
        if rows
    ]


@dataclass
class Card:
    label: str
    value: int | str
    url: str = ""
    alert: bool = False
    hint: str = ""


def attention(
    now: datetime, infos: Sequence[queue_ops.QueueInfo], using: str | None = None
) -> list[Card]:
    """The numbers an operator checks first: backlog, failures, stuck jobs, dead workers.

    ``infos`` are the queues with their counts by state (one grouped count for the page).
    """
    by_state = {s.value: sum(info.counts.get(s.value, 0) for info in infos) for s in JobState}
    jobs = reverse("admin:ojs_job_changelist")
    oldest = Job.objects.using(using).available().aggregate(t=Min("enqueued_at"))["t"]
    wait = display.seconds_ago(oldest, now)
    expired = Job.objects.using(using).expired(now).count()
    stale = Worker.objects.using(using).stale(stale_before(now)).count()
    workers = Worker.objects.using(using).count()
    paused = sum(1 for q in infos if q.paused)
    return [
        Card("available", by_state.get("available", 0), f"{jobs}?state__exact=available"),
        Card("active", by_state.get("active", 0), f"{jobs}?state__exact=active"),
        Card("retryable", by_state.get("retryable", 0), f"{jobs}?state__exact=retryable"),
        Card("scheduled", by_state.get("scheduled", 0), f"{jobs}?state__exact=scheduled"),
        Card("dead letter", by_state.get("discarded", 0),
             reverse("admin:ojs_deadletterjob_changelist"),
             alert=bool(by_state.get("discarded"))),
        Card("oldest waiting", display.humanize_seconds(wait) if wait is not None else "—",
             f"{jobs}?state__exact=available", alert=bool(wait and wait > 300),
             hint="since the oldest available job was enqueued"),
        Card("past their reservation", expired, f"{jobs}?state__exact=active",
             alert=bool(expired), hint="active jobs the reaper should rescue"),
        Card("workers (stale)", f"{workers} ({stale})",
             reverse("admin:ojs_worker_changelist") + ("?stale=yes" if stale else ""),
             alert=bool(stale)),
        Card("paused queues", paused, reverse("admin:ojs_queue_changelist"), alert=bool(paused)),
    ]  # fmt: skip


def state_table(infos: Sequence[queue_ops.QueueInfo]) -> dict[str, Any]:
    """Jobs by state per queue, with the totals row; each cell links to the job list."""
    states = [s.value for s in JobState]
    jobs = reverse("admin:ojs_job_changelist")
    rows = [
        {
            "name": info.name,
            "paused": info.paused,
            "url": f"{jobs}?{urlencode({'queue': info.name})}",
            "cells": [
                (info.counts.get(s, 0), f"{jobs}?{urlencode({'queue': info.name, 'state__exact': s})}")
                for s in states
            ],
            "total": sum(info.counts.values()),
        }
        for info in infos
    ]  # fmt: skip
    totals = [sum(info.counts.get(s, 0) for info in infos) for s in states]
    return {"states": states, "rows": rows, "totals": totals, "total": sum(totals)}


def context(now: datetime | None = None, using: str | None = None) -> dict[str, Any]:
    """The dashboard's figures, read from ``using`` (the replica on a GET, when there is one)."""
    now = now or timezone.now()
    minutes = window(now)
    from_events = settings.STORE_EVENTS
    series = per_minute(minutes, using) if from_events else per_minute_from_jobs(minutes, using)
    labels = [timezone.localtime(m).strftime("%H:%M") for m in minutes]
    throughput = throughput_by_queue(minutes[0], from_events=from_events, using=using)
    timing = timings(minutes[0], using)
    infos = queue_ops.list_queues(with_counts=True, using=using)
    return {
        "now": now,
        "cards": attention(now, infos, using),
        "table": state_table(infos),
        "from_events": from_events,
        "minutes": labels,
        "series": series,
        "per_minute_rows": [
            (label, *(series[name][i] for name in SERIES)) for i, label in enumerate(labels)
        ],
        "totals": {name: sum(values) for name, values in series.items()},
        "line_chart": charts.line_chart(labels, series),
        "throughput": throughput,
        "bar_chart": charts.bar_chart(throughput) if throughput else None,
        "timings": timing,
        "timing_charts": timing_charts(timing),
    }


@admin.register(Dashboard)
class DashboardAdmin(ReadOnlyAdmin[Dashboard]):
    """The admin index entry "Dashboard": its changelist is the dashboard page."""

    def has_view_permission(self, request: HttpRequest, obj: Dashboard | None = None) -> bool:
        return request.user.has_perm("ojs.view_job") or super().has_view_permission(request, obj)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.has_module_perms("ojs")

    def get_urls(self) -> list[URLPattern]:
        # Only the page itself: no object views under /admin/ojs/dashboard/<pk>/.
        name = f"{self.opts.app_label}_{self.opts.model_name}"
        return [
            path("", self.admin_site.admin_view(self.changelist_view), name=f"{name}_changelist"),
            path(
                "maintenance/",
                self.admin_site.admin_view(self.maintenance_view),
                name=f"{name}_maintenance",
            ),
        ]

    def maintenance_view(self, request: HttpRequest) -> HttpResponse:
        """The dashboard's switch (POST ``enabled`` = ``on``/``off``, ``reason``,
        ``duration``): needs the ``ojs.switch_maintenance`` permission."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not request.user.has_perm("ojs.switch_maintenance"):
            raise PermissionDenied
        enabled = request.POST.get("enabled") == "on"
        duration = request.POST.get("duration", "").strip() or None
        try:
            status = lifecycle.set_maintenance(
                enabled,
                reason=request.POST.get("reason", "").strip(),
                estimated_duration=duration,
                actor=admin_actor(request),
            )
        except OJSError as exc:
            self.message_user(request, exc.message, messages.ERROR)
        else:
            if status.enabled:
                text = "Maintenance mode is on: workers fetch no jobs until it is switched off."
            else:
                text = "Maintenance mode is off: workers fetch jobs again."
            self.message_user(request, text, messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:ojs_dashboard_changelist"))

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        opts = self.model._meta
        page = {
            **self.admin_site.each_context(request),
            "title": "Job dashboard",
            "subtitle": None,
            "opts": opts,
            "app_label": opts.app_label,
            "media": self.media,
            "window_minutes": WINDOW_MINUTES,
            "refresh_seconds": settings.ADMIN_REFRESH_SECONDS,
            "maintenance": lifecycle.maintenance_status(),
            "can_switch_maintenance": request.user.has_perm("ojs.switch_maintenance"),
            **context(using=read_alias(request)),
            **replica_context(request),
            **(extra_context or {}),
        }
        request.current_app = self.admin_site.name
        # ``?live=1``: only the part the page's script swaps in place.
        live = request.GET.get("live") == "1"
        template = "admin/ojs/dashboard_live.html" if live else "admin/ojs/dashboard.html"
        return TemplateResponse(request, template, page)
