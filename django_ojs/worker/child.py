"""The main function of a process-pool child: run handlers sent by the parent worker.

The child sets Django up (handler modules are discovered as in any process), runs one job
at a time and talks to its parent through a pipe: it never records outcomes itself. It
ignores the signals meant for the parent (the parent decides when children stop) and
exits when the parent goes away.
"""

from __future__ import annotations

import os
import queue
import signal
import threading
import time
from functools import partial
from typing import Any

PARENT_CHECK_INTERVAL = 1.0


def main(conn: Any) -> None:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGTSTP):
        signal.signal(sig, signal.SIG_IGN)
    import django

    django.setup()

    from django_ojs.context import JobContext
    from django_ojs.registry import registry
    from django_ojs.worker import execution
    from django_ojs.worker.execution import Outcome
    from django_ojs.worker.loop import load_envelope

    parent = os.getppid()
    jobs: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()
    replies: queue.SimpleQueue[Any] = queue.SimpleQueue()
    send_lock = threading.Lock()
    current: dict[str, JobContext | None] = {"ctx": None}
    # A cancellation can arrive before the job's context exists: keep it for the job.
    early_cancel: dict[str, tuple[Any, ...]] = {}
    lock = threading.Lock()

    def send(message: tuple[Any, ...]) -> None:
        with send_lock:
            conn.send(message)

    def read() -> None:
        try:
            while True:
                message = conn.recv()
                kind = message[0]
                if kind == "job":
                    jobs.put(message)
                elif kind == "cancel":
                    _, job_id, reason, error, requeue = message
                    with lock:
                        ctx = current["ctx"]
                        if ctx is None or ctx.job_id != job_id:
                            early_cancel[job_id] = (reason, error, requeue)
                            continue
                    ctx.cancel(reason or "cancelled", error=error, requeue=requeue)
                elif kind == "beat_reply":
                    replies.put(message[1])
        except (EOFError, OSError):
            jobs.put(None)
            os._exit(0)

    def watch_parent() -> None:
        while True:
            time.sleep(PARENT_CHECK_INTERVAL)
            if os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=read, daemon=True).start()
    threading.Thread(target=watch_parent, daemon=True).start()

    def beat() -> bool:
        send(("beat",))
        try:
            return bool(replies.get(timeout=30))
        except queue.Empty:
            return True

    def progress(value: float, message: str | None, data: Any) -> None:
        send(("progress", value, message, data))

    while True:
        item = jobs.get()
        if item is None:
            return
        _, job_id, attempt, job_type, args, using = item
        handler = registry.get(job_type)
        ctx = JobContext(
            partial(load_envelope, job_id, using),
            job_id=job_id,
            attempt=attempt,
            beat=beat,
            progress=progress,
        )
        with lock:
            current["ctx"] = ctx
            early = early_cancel.pop(job_id, None)
        if early is not None:
            ctx.cancel(early[0] or "cancelled", error=early[1], requeue=early[2])
        try:
            if handler is None:
                outcome = Outcome(False, error=execution.no_handler_error(job_type))
            else:
                outcome = execution.run(handler, args, ctx)
        finally:
            with lock:
                current["ctx"] = None
                early_cancel.clear()
        send(("done", outcome.as_tuple()))
