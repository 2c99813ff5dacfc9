"""The :class:`~django_ojs.context.JobContext` a handler gets, in the parent or a child.

Most handlers never look at ``ctx.job``: the envelope is read from the database only when
one does (a read; nothing here writes). Imports models, so a process-pool child imports
this module only after ``django.setup()``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from django_ojs.context import JobContext
from django_ojs.envelope import format_timestamp
from django_ojs.models import Job

Beat = Callable[[], Any]
ProgressReport = Callable[[float, str | None, dict[str, Any] | None], None]


def load_envelope(job_id: Any, using: str) -> dict[str, Any]:
    """The job's OJS envelope, read when a handler first looks at ``ctx.job``."""
    return Job.objects.using(using).get(pk=job_id).to_wire()


def job_context(
    job_id: Any,
    attempt: int,
    *,
    using: str,
    beat: Beat,
    progress: ProgressReport,
    worker_id: str | None = None,
    summary: dict[str, Any] | None = None,
) -> JobContext:
    """A context for attempt ``attempt`` of ``job_id`` whose envelope loads on first use."""
    return JobContext(
        partial(load_envelope, job_id, using),
        # The summary has the id as text already (a UUID's str() is slow Python).
        job_id=(summary or {}).get("id") or str(job_id),
        attempt=attempt,
        beat=beat,
        progress=progress,
        worker_id=worker_id,
        summary=summary,
    )


def summary_of(job: Job) -> dict[str, Any]:
    """What a fetch loaded of ``job`` (FETCH_FIELDS), as envelope fields."""
    return {
        "id": str(job.id),
        "type": job.type,
        "queue": job.queue,
        "args": job.args,
        "meta": job.meta if job.meta is not None else {},
        "attempt": job.attempt,
        "priority": job.priority,
        "enqueued_at": format_timestamp(job.enqueued_at),
        "scheduled_at": format_timestamp(job.scheduled_at),
    }
