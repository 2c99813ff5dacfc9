"""What a running handler can see and do: :class:`JobContext` and :class:`JobError`.

A handler that declares a ``ctx`` parameter gets a context: the job, its attempt, a way to
heartbeat and report progress, and a cancellation signal (timeout, job cancelled, worker
shutdown). The context only asks its worker to act; it never writes to the database.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any


class JobCancelled(Exception):
    """The attempt was cancelled (``ctx.raise_if_cancelled()``)."""


class JobError(Exception):
    """Raise from a handler to fail the attempt with a chosen error ``type``.

    ``retryable=False`` discards the job at once (OJS retry §6); ``details`` is stored with
    the error. Any other exception fails the attempt with its class name as the type.
    """

    def __init__(
        self,
        message: str,
        *,
        type: str = "handler_error",
        retryable: bool = True,
        details: dict[str, Any] | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.type = type
        self.retryable = retryable
        self.details = details


class JobView(Mapping[str, Any]):
    """A job's envelope for execution middleware: the fields the worker fetched with the
    job answer at once; any other key loads the whole envelope (one query)."""

    def __init__(self, ctx: JobContext) -> None:
        self._ctx = ctx

    def __getitem__(self, key: str) -> Any:
        if key in self._ctx.summary:
            return self._ctx.summary[key]
        return self._ctx.job[key]

    def get(self, key: str, default: Any = None) -> Any:
        if key in self._ctx.summary:
            return self._ctx.summary[key]
        return self._ctx.job.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._ctx.summary or key in self._ctx.job

    def __iter__(self) -> Iterator[str]:
        return iter(self._ctx.job)

    def __len__(self) -> int:
        return len(self._ctx.job)


class JobContext:
    """The context of one attempt, passed to handlers that declare a ``ctx`` parameter.

    Attributes
    ----------
    job:
        The job as an OJS envelope (``dict``: ``id``, ``type``, ``args``, ``meta``…).
    attempt:
        The attempt number, 1 for the first run.
    cancelled:
        A :class:`threading.Event` set when the handler should stop: its execution timeout
        passed, the job was cancelled, or the worker is shutting down. ``async def``
        handlers are also cancelled through ``asyncio``.
    """

    def __init__(
        self,
        job: dict[str, Any] | Callable[[], dict[str, Any]],
        *,
        job_id: str | None = None,
        attempt: int | None = None,
        beat: Callable[[], object] | None = None,
        progress: Callable[[float, str | None, dict[str, Any] | None], None] | None = None,
        worker_id: str | None = None,
        summary: dict[str, Any] | None = None,
    ):
        # The envelope may be built lazily: most handlers never look at it.
        #: What the worker already knows of the job (id, type, queue, args, meta...):
        #: middleware reads it through :attr:`view` without loading the envelope.
        self.summary = summary or {}
        self._job = job if isinstance(job, dict) else None
        self._job_factory = None if isinstance(job, dict) else job
        self.job_id: str = job_id if job_id is not None else str(self.job.get("id"))
        self.attempt: int = attempt if attempt is not None else int(self.job.get("attempt") or 0)
        self.worker_id = worker_id
        # The cancellation Event is made on first use (``cancelled``): most attempts are
        # never cancelled and most handlers never look, and a worker builds one context
        # per claimed job in its fetcher thread.
        self._cancelled: threading.Event | None = None
        self.cancel_reason: str | None = None
        #: The FAIL error the worker records if the handler stops because it was cancelled.
        self.cancel_error: dict[str, Any] | None = None
        self.cancel_requeue = False
        self._beat = beat
        self._progress = progress
        self._on_cancel: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        #: Scratch space for this attempt, shared by execution middleware (§4.4).
        self.metadata: dict[str, Any] = {}
        #: The trace this attempt runs in (set by ``TraceContextMiddleware``), if any.
        self.trace: Any = None

    @property
    def job(self) -> dict[str, Any]:
        if self._job is None and self._job_factory is not None:
            self._job = self._job_factory()
        return self._job or {}

    @property
    def view(self) -> Mapping[str, Any]:
        """The envelope as a mapping that loads it only for a key the summary lacks."""
        return JobView(self)

    @property
    def type(self) -> str:
        return str(self.job.get("type"))

    @property
    def args(self) -> list[Any]:
        return list(self.job.get("args") or [])

    @property
    def meta(self) -> dict[str, Any]:
        return dict(self.job.get("meta") or {})

    @property
    def workflow_id(self) -> str | None:
        """The id of the workflow this job belongs to, ``None`` outside workflows."""
        value = self.job.get("workflow_id")
        return str(value) if value is not None else None

    @property
    def parent_results(self) -> list[Any]:
        """Results of the upstream jobs (workflows §7): ``parent_results[i]`` is the result
        of chain step ``i`` (for step N, steps 0..N-1), or of batch member ``i`` in a
        batch callback. Empty for the first step and outside workflows."""
        return list(self.job.get("parent_results") or [])

    @property
    def cancelled(self) -> threading.Event:
        """The cancellation signal (see the class's attributes)."""
        event = self._cancelled
        if event is None:
            with self._lock:
                if self._cancelled is None:
                    self._cancelled = threading.Event()
                event = self._cancelled
        return event

    @property
    def is_cancelled(self) -> bool:
        """True once the handler has been asked to stop."""
        event = self._cancelled  # only cancel() sets it, and makes it first if need be
        return event is not None and event.is_set()

    def raise_if_cancelled(self) -> None:
        """Raise :class:`JobCancelled` if the handler has been asked to stop."""
        if self.is_cancelled:
            raise JobCancelled(self.cancel_reason or "cancelled")

    def heartbeat(self) -> bool:
        """Tell the server the job is alive now: extends its reservation and stall clock.

        The worker heartbeats every running job on its own every few seconds; call this in
        long loops to report liveness sooner. Returns False when the job was cancelled (the
        cancellation signal is then set too).
        """
        if self._beat is not None:
            self._beat()
        return not self.is_cancelled

    def progress(
        self, value: float, message: str | None = None, data: dict[str, Any] | None = None
    ) -> None:
        """Report progress: ``value`` from 0.0 to 1.0 (or a percentage above 1, up to 100).

        Recorded as a ``job.progress`` event (OJS events §10.10) and, like a heartbeat,
        resets the job's stall clock (timeouts §9.3).
        """
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError("progress value must be a number")
        fraction = float(value) / 100.0 if value > 1 else float(value)
        if not 0.0 <= fraction <= 1.0:
            raise ValueError("progress must be between 0.0 and 1.0 (or 0 and 100)")
        if self._progress is not None:
            self._progress(fraction, message, data)

    def on_cancel(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (from another thread) when the handler is asked to stop."""
        with self._lock:
            if not self.is_cancelled:
                self._on_cancel.append(callback)
                return
        callback()

    def cancel(
        self, reason: str, *, error: dict[str, Any] | None = None, requeue: bool = False
    ) -> None:
        """Ask the handler to stop (called by the worker, not by handlers).

        ``error`` is what the attempt fails with if the handler gives up because of it.
        """
        with self._lock:
            if self.is_cancelled:
                return
            self.cancel_reason = reason
            self.cancel_error = error
            self.cancel_requeue = requeue
            if self._cancelled is None:
                self._cancelled = threading.Event()
            self._cancelled.set()
            callbacks, self._on_cancel = self._on_cancel, []
        for callback in callbacks:
            # A failing callback (a closed event loop) must not break the worker.
            with contextlib.suppress(Exception):
                callback()

    def __repr__(self) -> str:
        return f"<JobContext {self.type} {self.job_id} attempt={self.attempt}>"
