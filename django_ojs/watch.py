"""Follow one job until it finishes: the loop behind ``GET /jobs/{id}/progress/stream``.

Reads only (``lifecycle.progress_of``): it polls the job's state and last progress report
every ``OJS_PROGRESS_STREAM_POLL_SECONDS`` and yields what changed, a heartbeat when
nothing did for ``OJS_PROGRESS_STREAM_HEARTBEAT_SECONDS``, and stops when the job reaches
a terminal state or after ``OJS_PROGRESS_STREAM_SECONDS``. Never writes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from django_ojs import lifecycle
from django_ojs.conf import settings
from django_ojs.exceptions import JobNotFound
from django_ojs.states import JobState

#: The event that ends a stream, per terminal state (progress §7.2).
FINAL = {
    JobState.COMPLETED: "completed",
    JobState.DISCARDED: "failed",
    JobState.CANCELLED: "cancelled",
}

_clock = time.monotonic
_sleep = time.sleep


@dataclass(frozen=True)
class Update:
    """``kind`` is ``progress``, ``state`` (a non-terminal state change), one of
    :data:`FINAL`'s values, ``heartbeat`` or ``timeout`` (the duration bound)."""

    kind: str
    data: dict[str, Any] = field(default_factory=dict)


def follow(job_id: Any, *, using: str | None = None) -> Iterator[Update]:
    """Updates of job ``job_id`` until it finishes or the stream's duration is over.

    The first update is the job's current progress (or its state, before any report).
    Raises :class:`JobNotFound` at once for an unknown job; a job deleted while followed
    ends the stream with a ``state`` update ``{"state": "deleted"}``.
    """
    job = lifecycle.progress_of(job_id, using=using)  # raises before the first yield
    poll = settings.PROGRESS_STREAM_POLL_SECONDS
    heartbeat = settings.PROGRESS_STREAM_HEARTBEAT_SECONDS
    deadline = _clock() + settings.PROGRESS_STREAM_SECONDS
    last_progress = job.last_progress
    state = job.state
    yield (
        Update("progress", _progress(job.last_progress))
        if job.last_progress
        else Update("state", {"state": state})
    )
    quiet_since = _clock()
    while True:
        if state in FINAL:
            final = _progress(last_progress) if last_progress else {}
            if state == JobState.COMPLETED:
                final["progress"] = 1.0
            yield Update(FINAL[JobState(state)], {**final, "state": state})
            return
        if _clock() >= deadline:
            yield Update("timeout", {"state": state})
            return
        _sleep(poll)
        try:
            job = lifecycle.progress_of(job_id, using=using)
        except JobNotFound:
            yield Update("state", {"state": "deleted"})
            return
        changed = False
        if job.last_progress and job.last_progress != last_progress:
            last_progress = job.last_progress
            yield Update("progress", _progress(last_progress))
            changed = True
        if job.state != state:
            state = job.state
            if state not in FINAL:
                yield Update("state", {"state": state})
                changed = True
        if changed:
            quiet_since = _clock()
        elif _clock() - quiet_since >= heartbeat:
            yield Update("heartbeat")
            quiet_since = _clock()


def _progress(last: dict[str, Any]) -> dict[str, Any]:
    return {k: last.get(k) for k in ("progress", "message", "data", "updated_at")}
