"""Where handlers run: a pool of runner threads, or of child processes (``--pool processes``).

A pool takes attempts, runs them and hands each outcome to ``on_done``. It can pass a
cancellation signal to a running attempt and give up on one: a thread cannot be killed,
so its runner is replaced and the late outcome dropped; a child process is killed.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from django.db import close_old_connections, connections

from django_ojs.worker import child, execution
from django_ojs.worker.attempt import Attempt
from django_ojs.worker.messages import (
    Beat,
    BeatReply,
    CancelJob,
    Done,
    Outcome,
    Progress,
    Ready,
    RunJob,
    ToChild,
    ToParent,
)

logger = logging.getLogger("django_ojs.worker")

OnDone = Callable[[Attempt, Outcome], None]

#: How long a starting pool waits for its children to set Django up (seconds).
READY_TIMEOUT = 120.0
#: A runner drops broken or expired database connections at most this often (seconds).
CONNECTION_CHECK_INTERVAL = 1.0


def run_in_thread(attempt: Attempt) -> Outcome:
    if attempt.handler is None:
        return Outcome(False, error=execution.no_handler_error(attempt.type))
    return execution.run(attempt.handler, attempt.args, attempt.ctx)


class ThreadPool:
    """``size`` runner threads taking attempts from one queue."""

    kind = "threads"

    def __init__(self, size: int, on_done: OnDone, *, name: str = "ojs-runner"):
        self.size = size
        self.on_done = on_done
        self.name = name
        self._queue: queue.SimpleQueue[Attempt | None] = queue.SimpleQueue()
        self._count = 0
        self._lock = threading.Lock()
        self._stopping = False
        self._starter: threading.Thread | None = None

    def start(self) -> None:
        # The runners start in a thread of their own: starting 500 threads takes about
        # 80 ms, which the worker would otherwise spend before its first claim. Attempts
        # submitted meanwhile wait in the queue for the runners started so far.
        self._starter = threading.Thread(
            target=self._start_runners, name=f"{self.name}-starter", daemon=True
        )
        self._starter.start()

    def _start_runners(self) -> None:
        for _ in range(self.size):
            if self._stopping:
                return
            self._spawn()

    def _spawn(self) -> None:
        with self._lock:
            self._count += 1
            n = self._count
        # Daemon: an abandoned handler that never returns must not keep the process alive.
        threading.Thread(target=self._runner, name=f"{self.name}-{n}", daemon=True).start()

    def _runner(self) -> None:
        checked = 0.0
        try:
            while True:
                attempt = self._queue.get()
                if attempt is None:
                    return
                now = time.monotonic()
                if now - checked > CONNECTION_CHECK_INTERVAL:
                    # As Django does between requests: drop broken or too old connections.
                    close_old_connections()
                    checked = now
                outcome = run_in_thread(attempt)
                self.on_done(attempt, outcome)
                if attempt.abandoned:
                    return  # a replacement runner took this one's place
        finally:
            connections.close_all()

    def submit(self, attempt: Attempt) -> None:
        self._queue.put(attempt)

    def cancel(self, attempt: Attempt) -> None:
        """The context's signal is the thread's only way to stop (set by the worker)."""

    def abandon(self, attempt: Attempt) -> None:
        self._spawn()

    def stop(self) -> None:
        self._stopping = True
        if self._starter is not None:
            self._starter.join()  # every runner it started gets its None below
        for _ in range(self._count):
            self._queue.put(None)


class ProcessPool:
    """``size`` child processes, each driven by one slot thread of the parent.

    Children are started with ``spawn`` (no fork of a threaded process) and set Django up
    themselves. Parent and child exchange the typed messages of ``messages.py``: a child
    reports heartbeats and progress, the slot thread relays them to the worker. A killed
    or crashed child is replaced.
    """

    kind = "processes"

    def __init__(
        self,
        size: int,
        on_done: OnDone,
        *,
        on_beat: Callable[[Attempt], bool],
        on_progress: Callable[[Attempt, float, str | None, Any], None],
        using: str,
    ):
        self.using = using
        self.size = size
        self.on_done = on_done
        self.on_beat = on_beat
        self.on_progress = on_progress
        self.queue: queue.SimpleQueue[Attempt | None] = queue.SimpleQueue()
        self.slots: list[ProcessSlot] = []
        self.stopping = threading.Event()

    def start(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.slots = [ProcessSlot(self, ctx, i + 1) for i in range(self.size)]
        # The children set Django up in parallel; the worker claims no job before they
        # can run it, so no job's timeout runs while a child is still starting.
        for slot in self.slots:
            slot.spawn_child()
        deadline = time.monotonic() + READY_TIMEOUT
        for slot in self.slots:
            slot.wait_ready(deadline - time.monotonic())
        for slot in self.slots:
            slot.start()

    def submit(self, attempt: Attempt) -> None:
        self.queue.put(attempt)

    def slot_of(self, attempt: Attempt) -> ProcessSlot | None:
        for slot in self.slots:
            if slot.current is attempt:
                return slot
        return None

    def cancel(self, attempt: Attempt) -> None:
        # An attempt no slot has taken yet is told when one takes it (ProcessSlot.execute).
        slot = self.slot_of(attempt)
        if slot is not None:
            slot.send_cancel(attempt)

    def abandon(self, attempt: Attempt) -> None:
        slot = self.slot_of(attempt)
        if slot is not None:
            slot.kill()

    def stop(self) -> None:
        self.stopping.set()
        for _ in self.slots:
            self.queue.put(None)
        for slot in self.slots:
            slot.kill()


class ProcessSlot:
    """One child process and the parent thread that feeds it attempts, one at a time."""

    def __init__(self, pool: ProcessPool, mp: Any, n: int):
        self.pool = pool
        self.mp = mp
        self.n = n
        self.current: Attempt | None = None
        self.process: Any = None
        self.conn: Any = None
        self._send_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"ojs-slot-{n}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def spawn_child(self) -> None:
        parent_conn, child_conn = self.mp.Pipe()
        process = self.mp.Process(
            target=child.main, args=(child_conn,), name=f"ojs-child-{self.n}", daemon=True
        )
        process.start()
        child_conn.close()
        self.process, self.conn = process, parent_conn

    def wait_ready(self, timeout: float) -> bool:
        """Wait for the child's :class:`Ready`; False if it died or took too long."""
        try:
            if self.conn.poll(max(timeout, 0.0)):
                message = self.conn.recv()
                if isinstance(message, Ready):
                    return True
        except (EOFError, OSError):
            pass
        logger.warning("handler process %d did not report ready", self.n)
        return False

    def send(self, message: ToChild) -> None:
        with self._send_lock, contextlib.suppress(OSError, ValueError):
            self.conn.send(message)

    def send_cancel(self, attempt: Attempt) -> None:
        ctx = attempt.ctx
        self.send(
            CancelJob(
                str(attempt.job_id),
                ctx.cancel_reason or "cancelled",
                ctx.cancel_error,
                ctx.cancel_requeue,
            )
        )

    def kill(self) -> None:
        process = self.process
        if process is not None and process.is_alive():
            process.kill()

    def _run(self) -> None:
        try:
            while True:
                attempt = self.pool.queue.get()
                if attempt is None:
                    return
                self.current = attempt
                try:
                    outcome = self.execute(attempt)
                finally:
                    self.current = None
                if outcome is not None:
                    self.pool.on_done(attempt, outcome)
                if self.pool.stopping.is_set():
                    return
        finally:
            self.kill()
            connections.close_all()

    def execute(self, attempt: Attempt) -> Outcome | None:
        """Run ``attempt`` in the child; relay its beats and progress until it is done."""
        if attempt.handler is None:
            return Outcome(False, error=execution.no_handler_error(attempt.type))
        job_id = str(attempt.job_id)
        self.send(
            RunJob(
                job_id, attempt.attempt, attempt.type, attempt.args, self.pool.using,
                summary=attempt.ctx.summary,
            )
        )  # fmt: skip
        if attempt.ctx.is_cancelled:  # asked to stop before this slot took it
            self.send_cancel(attempt)
        while True:
            try:
                message: ToParent = self.conn.recv()
            except (EOFError, OSError):
                return self._child_died(attempt)
            if isinstance(message, Ready):
                continue  # a child that was slow to start
            if message.job_id != job_id:
                logger.warning("ignoring %r: slot %d runs job %s", message, self.n, job_id)
            elif isinstance(message, Done):
                return message.outcome
            elif isinstance(message, Beat):
                self.send(BeatReply(job_id, self.pool.on_beat(attempt)))
            elif isinstance(message, Progress):
                try:
                    self.pool.on_progress(attempt, message.value, message.message, message.data)
                except Exception:
                    logger.exception("progress report of job %s failed", attempt.job_id)

    def _child_died(self, attempt: Attempt) -> Outcome | None:
        process = self.process
        process.join(timeout=5)
        exitcode = process.exitcode
        with contextlib.suppress(OSError):
            self.conn.close()
        if not self.pool.stopping.is_set():
            self.spawn_child()
            self.wait_ready(READY_TIMEOUT)
        if attempt.abandoned:
            return None  # we killed it (hard timeout or shutdown): already failed
        logger.error("handler process for job %s exited with code %s", attempt.job_id, exitcode)
        return Outcome(False, error=execution.crash_error(exitcode))
