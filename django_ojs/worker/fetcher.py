"""The fetcher: claims batches of jobs for the pool's free slots, and waits for work.

It runs in the worker's main thread. When the pool has free slots it claims up to that
many jobs with one ``lifecycle.fetch``, builds their attempts (deadlines from what the
claim stored) and submits them. When the queues run dry it sleeps on the listener (a
PostgreSQL notification or the poll interval). It never writes outcomes.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

from django.db import connections
from django.utils import timezone

from django_ojs import lifecycle, resilience
from django_ojs.exceptions import PoolNotFound
from django_ojs.policy import Durations, effective
from django_ojs.registry import Registry
from django_ojs.validation import MAX_FETCH_COUNT
from django_ojs.worker import attempt as attempts
from django_ojs.worker.context import job_context, summary_of
from django_ojs.worker.inflight import InFlight
from django_ojs.worker.pool import ProcessPool, ThreadPool

logger = logging.getLogger("django_ojs.worker")

RUNNING, QUIET, TERMINATE = "running", "quiet", "terminate"
#: The job fields a fetch loads; the full envelope is read only if a handler asks for it.
#: Everything :func:`~django_ojs.policy.effective` and the attempt's deadlines read is
#: here: a deferred field would cost one query per job.
FETCH_FIELDS = (
    "type", "queue", "args", "meta", "state", "attempt", "priority", "worker_id",
    "started_at", "timeout_at", "visible_until", "stalled_at",
    "timeout_ms", "grace_period_ms", "visibility_timeout_ms", "heartbeat_timeout_ms",
    "enqueued_at", "scheduled_at",
)  # fmt: skip
#: A busy worker waits up to this long (seconds) for a quarter of its slots to be free
#: before it fetches, rather than fetching one job per returning handler.
BATCH_WAIT = 0.005


class Listener(Protocol):
    """What the fetcher needs of ``lifecycle.listen(...)``: wait for a push or a timeout."""

    def wait(self, timeout: float) -> bool: ...


class Fetcher:
    """Fills free slots with claimed jobs until the worker's state is ``terminate``.

    ``wakeup`` is set when a slot frees up or the worker's state changes; ``beat`` and
    ``progress`` are what a handler's ``ctx.heartbeat()`` and ``ctx.progress()`` call.
    """

    def __init__(
        self,
        worker_id: str,
        *,
        queues: list[str],
        concurrency: int,
        poll_interval: float,
        handlers: Registry,
        inflight: InFlight,
        pool: ThreadPool | ProcessPool,
        state: Callable[[], str],
        wakeup: threading.Event,
        beat: Callable[[], None],
        progress: Callable[[Any, float, str | None, Any], None],
        using: str,
        fetch: lifecycle.PoolFetch | None = None,
    ):
        self.worker_id = worker_id
        self.queues = queues
        self.concurrency = concurrency
        self.poll_interval = poll_interval
        self.handlers = handlers
        self.inflight = inflight
        self.pool = pool
        self.state = state
        self.wakeup = wakeup
        self.beat = beat
        self.progress = progress
        self.using = using
        self.min_batch = max(1, concurrency // 4)
        inflight.wake_when(capacity=concurrency, batch=self.min_batch)
        # The same fetch every time: validated and its settings read once. A worker in a
        # pool gets the pool's (which chooses among the pool's queues).
        self.fetch: lifecycle.Fetch | lifecycle.PoolFetch = fetch or lifecycle.Fetch(
            queues,
            worker_id=worker_id,
            fields=FETCH_FIELDS,
            register=False,  # registered at start; the supervisor heartbeats
            using=using,
        )
        self.outage = resilience.Outage("fetcher", logger, using=using)
        #: When the fetch in progress started (None between fetches): its claims are
        #: stamped with a later time, and are in ``inflight`` only once it is cleared.
        self.fetching_since: datetime | None = None
        #: The worker pool it fetches for was found deleted (logged once).
        self.pool_missing = False

    def received_before(self) -> datetime:
        """A time before which every job this worker's fetches claimed is in ``inflight``
        (or was settled), unless its fetch's reply never arrived: now, or the start of
        the fetch in progress. Read it before listing the held jobs for a heartbeat."""
        now = timezone.now()
        since = self.fetching_since
        return since if since is not None and since < now else now

    def run(self, listener: Listener) -> None:
        """Fetch and submit until the worker terminates."""
        while self.state() != TERMINATE:
            self.wakeup.clear()
            if self.state() == QUIET:
                self.wakeup.wait(self.poll_interval)
                continue
            free = self.concurrency - len(self.inflight)
            if free <= 0:
                self.wakeup.wait(self.poll_interval)  # set when a handler returns
                continue
            if free < self.min_batch and len(self.inflight):
                free = self.gather_slots(free)
            count = min(free, MAX_FETCH_COUNT)  # one fetch claims at most this many
            self.fetching_since = timezone.now()
            try:
                jobs = self.fetch(count)
            except PoolNotFound as exc:
                # The worker's pool was deleted: wait for it to come back, saying so once.
                self.fetching_since = None
                if not self.pool_missing:
                    logger.error("%s Waiting for it to be created again.", exc.message)
                    self.pool_missing = True
                self.wakeup.wait(self.poll_interval)
                continue
            except Exception as exc:
                # Its claims, if any committed, never reached us: heartbeats release them.
                self.fetching_since = None
                if resilience.is_connection_error(exc):
                    # Logged once per outage; back off (the listener may be gone too).
                    self.pause(self.outage.failed(exc))
                else:
                    logger.exception("fetch failed; retrying in %.1fs", self.poll_interval)
                    connections[self.using].close()
                    self.wakeup.wait(self.poll_interval)
                continue
            self.outage.succeeded()
            self.pool_missing = False
            try:
                if jobs:
                    # The defaults the claim stored the jobs' deadlines from.
                    self.submit(jobs, self.fetch.defaults)
            finally:
                self.fetching_since = None
            if len(jobs) < count:
                # The queues are empty for now: sleep until a push is notified
                # (PostgreSQL LISTEN) or the poll interval passes.
                listener.wait(self.poll_interval)

    def pause(self, seconds: float) -> None:
        """Sleep ``seconds`` unless the worker terminates: returning handlers do not cut
        a back-off short."""
        deadline = time.monotonic() + seconds
        while self.state() != TERMINATE:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self.wakeup.clear()
            self.wakeup.wait(left)

    def gather_slots(self, free: int) -> int:
        """A busy worker waits a moment for more free slots, so that one fetch claims a
        batch: a fetch costs a few round trips whatever its size."""
        deadline = time.monotonic() + BATCH_WAIT
        while free < self.min_batch and self.state() == RUNNING:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self.wakeup.clear()
            self.wakeup.wait(left)
            free = self.concurrency - len(self.inflight)
        return free

    def submit(self, jobs: list[Any], defaults: Durations) -> None:
        """Hand freshly claimed jobs to the pool."""
        # One clock reading per batch: it turns the stored deadlines into monotonic ones.
        clock = attempts.Clock()
        for job in jobs:
            ctx = job_context(
                job.id,
                job.attempt,
                using=self.using,
                beat=self.beat,
                progress=functools.partial(self.progress, job.id),
                worker_id=self.worker_id,
                summary=summary_of(job),
            )
            attempt = attempts.build(
                job,
                handler=self.handlers.get(job.type),
                ctx=ctx,
                durations=effective(job, defaults=defaults),
                clock=clock,
            )
            self.inflight.add(attempt)
            self.pool.submit(attempt)
