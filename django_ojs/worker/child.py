"""The main function of a process-pool child: run handlers sent by the parent worker.

The child sets Django up (handler modules are discovered as in any process), runs one job
at a time and talks to its parent through a pipe with the messages of ``messages.py``: it
never records outcomes itself. It ignores the signals meant for the parent (the parent
decides when children stop) and exits when the parent goes away.
"""

from __future__ import annotations

import os
import queue
import signal
import threading
import time
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from django_ojs.context import JobContext

PARENT_CHECK_INTERVAL = 1.0
#: A handler's ``ctx.heartbeat()`` waits at most this long for the parent's reply.
BEAT_REPLY_TIMEOUT = 30.0


class Child:
    """The child's side of the pipe: a reader thread, and the job loop in the main thread."""

    def __init__(self, conn: Any):
        self.conn = conn
        self.jobs: queue.SimpleQueue[RunJob | None] = queue.SimpleQueue()
        self.replies: queue.SimpleQueue[BeatReply] = queue.SimpleQueue()
        self.send_lock = threading.Lock()
        self.lock = threading.Lock()
        self.current: JobContext | None = None
        # A cancellation can arrive before the job's context exists: keep it for the job.
        self.early_cancel: dict[str, CancelJob] = {}

    def send(self, message: ToParent) -> None:
        with self.send_lock:
            self.conn.send(message)

    def read(self) -> None:
        try:
            while True:
                message: ToChild = self.conn.recv()
                if isinstance(message, RunJob):
                    self.jobs.put(message)
                elif isinstance(message, CancelJob):
                    self.cancel(message)
                elif isinstance(message, BeatReply):
                    self.replies.put(message)
        except (EOFError, OSError):
            self.jobs.put(None)
            os._exit(0)

    def cancel(self, message: CancelJob) -> None:
        with self.lock:
            ctx = self.current
            if ctx is None or ctx.job_id != message.job_id:
                self.early_cancel[message.job_id] = message
                return
        ctx.cancel(message.reason or "cancelled", error=message.error, requeue=message.requeue)

    def beat(self, job_id: str) -> bool:
        self.send(Beat(job_id))
        deadline = time.monotonic() + BEAT_REPLY_TIMEOUT
        while (left := deadline - time.monotonic()) > 0:
            try:
                reply = self.replies.get(timeout=left)
            except queue.Empty:
                break
            if reply.job_id == job_id:
                return reply.alive
        return True

    def progress(self, job_id: str, value: float, message: str | None, data: Any) -> None:
        self.send(Progress(job_id, value, message, data))

    def run(self, message: RunJob) -> Outcome:
        from django_ojs.registry import registry
        from django_ojs.worker import execution
        from django_ojs.worker.context import job_context

        job_id = message.job_id
        ctx = job_context(
            job_id,
            message.attempt,
            using=message.using,
            beat=lambda: self.beat(job_id),
            progress=lambda value, text, data: self.progress(job_id, value, text, data),
            summary=message.summary,
        )
        with self.lock:
            self.current = ctx
            early = self.early_cancel.pop(job_id, None)
        if early is not None:
            ctx.cancel(early.reason or "cancelled", error=early.error, requeue=early.requeue)
        try:
            handler = registry.get(message.type)
            if handler is None:
                return Outcome(False, error=execution.no_handler_error(message.type))
            return execution.run(handler, list(message.args), ctx)
        finally:
            with self.lock:
                self.current = None
                self.early_cancel.clear()

    def serve(self) -> None:
        while True:
            message = self.jobs.get()
            if message is None:
                return
            outcome = self.run(message)
            self.send(Done(message.job_id, outcome))


def watch_parent(parent: int) -> None:
    while True:
        time.sleep(PARENT_CHECK_INTERVAL)
        if os.getppid() != parent:
            os._exit(0)


def main(conn: Any) -> None:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGTSTP):
        signal.signal(sig, signal.SIG_IGN)
    import django

    django.setup()

    child = Child(conn)
    child.send(Ready(os.getpid()))
    threading.Thread(target=child.read, daemon=True).start()
    threading.Thread(target=watch_parent, args=(os.getppid(),), daemon=True).start()
    child.serve()
