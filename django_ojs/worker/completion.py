"""Record outcomes in small batches: one ``ack_many`` and one ``fail_many`` per batch.

A thread takes every outcome queued since its last write (up to ``MAX_BATCH``) and writes
them through ``lifecycle``, which still checks that each attempt is this worker's
(pgqueuer batches completions the same way). Until written, the jobs stay in the
worker's heartbeats, so their reservations cannot lapse while they wait.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from django.db import close_old_connections, connections

from django_ojs import lifecycle, resilience
from django_ojs.worker.messages import Outcome

logger = logging.getLogger("django_ojs.worker")

MAX_BATCH = 500
#: Attempts to write a batch before giving up on it (the reaper then recovers the jobs).
MAX_TRIES = 20
#: Once stopping, how long a write waits for an unavailable database (seconds).
STOPPING_PATIENCE = 10.0

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
        acked: list[Any] | None = None
        failed: list[Any] | None = None
        for tries in range(1, MAX_TRIES + 1):
            try:
                close_old_connections()
                if acked is None:
                    acked = (
                        self._retrying(
                            lambda: lifecycle.ack_many(
                                acks, worker_id=self.worker_id, using=self.using
                            ),
                            stopping,
                        )
                        if acks
                        else []
                    )
                if failed is None:
                    failed = (
                        self._retrying(
                            lambda: lifecycle.fail_many(
                                fails, worker_id=self.worker_id, using=self.using
                            ),
                            stopping,
                        )
                        if fails
                        else []
                    )
                break
            except Exception:
                logger.exception("recording %d outcomes failed (try %d)", len(batch), tries)
                connections.close_all()
                if stopping and tries >= 3:
                    break
                time.sleep(min(0.1 * 2**tries, 2.0))
        acked, failed = acked or [], failed or []
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
