"""Record outcomes in small batches: one ``ack_many`` and one ``fail_many`` per batch.

A thread takes every outcome queued since its last write (up to ``MAX_BATCH``) and writes
them through ``lifecycle``, which still checks that each attempt is this worker's
(pgqueuer batches completions the same way). Until written, the jobs stay in the
worker's heartbeats, so their reservations cannot lapse while they wait.

One outcome never holds up the others: a batch the database refuses (``DataError``…: a
value it cannot store) is split in halves at once until the refused item is alone; that
ack is then failed as ``result_not_storable`` (a refused failure is recorded as
``error_not_storable``). Only a lost connection makes the writer retry the same batch.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from django.db import connections

from django_ojs import failure, lifecycle, resilience
from django_ojs.worker.messages import Outcome

logger = logging.getLogger("django_ojs.worker")

MAX_BATCH = 500
#: Longest database message kept in a ``result_not_storable``/``error_not_storable`` error.
MAX_REASON_CHARS = 500
#: Once stopping, how long a write waits for an unavailable database (seconds).
STOPPING_PATIENCE = 10.0

_Item = tuple[Any, ...]

_STOP = object()


class Completer:
    def __init__(
        self,
        worker_id: str,
        *,
        using: str | None,
        on_written: Callable[[list[Any]], None],
    ):
        self.worker_id = worker_id
        self.using = using
        self.on_written = on_written
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="ojs-completer", daemon=True)
        self.completed = 0
        self.failed = 0
        self.ignored = 0
        #: Outcomes given up unwritten (left to the reaper).
        self.unwritten = 0
        self.outage = resilience.Outage("outcome writer", logger, using=using)

    def start(self) -> None:
        self._thread.start()

    def put(self, job_id: Any, attempt: int, outcome: Outcome) -> None:
        self._queue.put((job_id, attempt, outcome))

    def stop(self, timeout: float | None = None) -> None:
        """Write everything queued so far, then end the thread."""
        self._queue.put(_STOP)
        self._thread.join(timeout)

    def _run(self) -> None:
        try:
            stopping = False
            while not stopping:
                item = self._queue.get()
                if item is _STOP:
                    break
                batch = [item]
                while len(batch) < MAX_BATCH:
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if item is _STOP:
                        stopping = True
                        break
                    batch.append(item)
                self._write(batch, stopping)
        finally:
            connections.close_all()

    def _retrying(self, call: Callable[[], list[Any]], stopping: bool) -> list[Any]:
        """``call()``, retried for as long as the database is unavailable (not lost: the
        jobs stay in the heartbeats meanwhile), or up to ``STOPPING_PATIENCE`` once
        stopping. Other errors are raised, and counted as tries by ``_write``."""
        patience = STOPPING_PATIENCE if stopping else None
        return resilience.retry(call, self.outage, give_up_after=patience)

    def _write(self, batch: list[tuple[Any, int, Outcome]], stopping: bool) -> None:
        acks = [(job_id, attempt, o.result) for job_id, attempt, o in batch if o.ok]
        fails = [(job_id, attempt, o.error, o.requeue) for job_id, attempt, o in batch if not o.ok]
        acked: list[Any] = []
        failed: list[Any] = []
        # An ack the database refuses is failed instead, naming the cause (result_not_storable).
        refused = self._record(acks, self._ack, acked, stopping)
        fails += [
            (job_id, attempt, failure.result_not_storable(reason), False)
            for (job_id, attempt, _), reason in refused
        ]
        refused = self._record(fails, self._fail, failed, stopping)
        # A failure whose report is refused is recorded with error_not_storable; if even that
        # is refused, the job is left to the reaper (its reservation lapses).
        refused = self._record(
            [
                (job_id, attempt, failure.error_not_storable(reason), requeue)
                for (job_id, attempt, _, requeue), reason in refused
            ],
            self._fail,
            failed,
            stopping,
        )
        self.unwritten += len(refused)
        self.completed += len(acked)
        self.failed += len(failed)
        self.ignored += len(batch) - len(acked) - len(failed)
        if logger.isEnabledFor(logging.DEBUG):
            done = {*acked, *failed}
            for job_id, attempt, _ in batch:
                if job_id not in done:
                    logger.debug("late outcome of job %s attempt %d ignored", job_id, attempt)
        failed_ids = set(failed)
        for job_id, attempt, outcome in batch:
            if not outcome.ok and job_id in failed_ids:
                error = outcome.error or {}
                logger.info(
                    "job %s attempt %d failed: %s: %s",
                    job_id,
                    attempt,
                    error.get("type"),
                    error.get("message"),
                )
        self.on_written([job_id for job_id, _, _ in batch])

    def _ack(self, items: list[Any]) -> list[Any]:
        return lifecycle.ack_many(items, worker_id=self.worker_id, using=self.using)

    def _fail(self, items: list[Any]) -> list[Any]:
        return lifecycle.fail_many(items, worker_id=self.worker_id, using=self.using)

    def _record(
        self,
        items: list[_Item],
        write: Callable[[list[_Item]], list[Any]],
        done: list[Any],
        stopping: bool,
    ) -> list[tuple[_Item, str]]:
        """Write ``items``, adding the ids written to ``done``; return those refused.

        A batch the database refuses (a value it cannot store: ``DataError``…, not a lost
        connection) is split in halves at once, so the other outcomes are written and the
        refused one is isolated without waiting; each refused item comes back with the
        reason.
        """
        if not items:
            return []
        try:
            done.extend(self._call(write, items, stopping))
            return []
        except resilience.CONNECTION_ERRORS:
            self.unwritten += len(items)
            return []  # given up while stopping: the reaper recovers these jobs
        except Exception as exc:
            if len(items) > 1:
                half = len(items) // 2
                return [
                    *self._record(items[:half], write, done, stopping),
                    *self._record(items[half:], write, done, stopping),
                ]
            logger.exception("the outcome of job %s attempt %s was refused", *items[0][:2])
            return [(items[0], f"{type(exc).__name__}: {exc}"[:MAX_REASON_CHARS])]

    def _call(
        self, write: Callable[[list[_Item]], list[Any]], items: list[_Item], stopping: bool
    ) -> list[Any]:
        """``write(items)``, tried again while the database cannot be reached."""
        resilience.drop_broken_connection(self.using)
        return self._retrying(lambda: write(items), stopping)
