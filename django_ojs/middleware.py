"""Middleware chains (OJS core §9, ojs-middleware.md): enqueue and execution.

Two chains, configured like Django's ``MIDDLEWARE`` with dotted paths:

* ``OJS_ENQUEUE_MIDDLEWARE`` runs around every push (Python ``enqueue``, HTTP, cron,
  workflows, the Django tasks backend), in order (§3.2). Each entry is called as
  ``middleware(job, next)`` with the :class:`~django_ojs.envelope.JobSpec` about to be
  written (its ``id`` already set) and returns ``next(job)`` (maybe with a changed job,
  ``dataclasses.replace(job, meta=...)``), ``None`` to drop the job (§7.2), or raises to
  abort the push (§7.1).
* ``OJS_EXECUTION_MIDDLEWARE`` wraps every handler call, the first entry outermost
  (§4.2). Each entry is called as ``middleware(job, ctx, next)`` with the job's envelope
  (``dict``) and its :class:`~django_ojs.context.JobContext`; ``next()`` runs the rest of
  the chain and the handler and returns the result. Not calling ``next()`` short-circuits:
  what the middleware returns is the job's result. An exception fails the attempt as a
  handler's would (retry policy applies); a middleware must not swallow one silently
  (§7.5).

An entry is a dotted path to a class (instantiated once, with no arguments) or to a
callable, or the object itself. Identity for :meth:`Chain.remove`, ``insert_before`` and
``insert_after`` (§5.2) is the entry's class, the object, or its dotted path. A chain can
be changed from Python (``django_ojs.middleware.enqueue_chain().add(...)``, in your
``AppConfig.ready``) until its first use, which freezes it (§5.3); changing the setting
(``override_settings`` in tests) rebuilds it.
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import Any

from django.core.signals import setting_changed
from django.utils.module_loading import import_string

from django_ojs import tracing
from django_ojs.conf import settings
from django_ojs.envelope import JobSpec
from django_ojs.exceptions import OJSError

logger = logging.getLogger("django_ojs.jobs")

EnqueueNext = Callable[[JobSpec], JobSpec | None]
ExecutionNext = Callable[[], Any]


class ChainFrozen(OJSError):
    """A middleware chain was changed after it started processing jobs (§5.3)."""

    code = "chain_frozen"


class MiddlewareError(OJSError):
    """A middleware broke the chain's contract (changed a job's id, called next twice)."""

    code = "middleware_error"


class Chain:
    """An ordered list of middleware with the five operations of §5.1 and inspection."""

    def __init__(self, kind: str, entries: list[Any] | None = None) -> None:
        self.kind = kind
        self._entries: list[Any] = list(entries or [])
        self._frozen = False
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ §5.1

    def add(self, middleware: Any) -> None:
        """Append ``middleware`` (runs after / inside the others)."""
        self._change(lambda e: [*e, _load(middleware)])

    def prepend(self, middleware: Any) -> None:
        """Insert ``middleware`` first (runs before / around the others)."""
        self._change(lambda e: [_load(middleware), *e])

    def insert_before(self, existing: Any, middleware: Any) -> None:
        """Insert ``middleware`` immediately before ``existing``."""
        self._change(lambda e: _insert(e, self._index(e, existing), _load(middleware)))

    def insert_after(self, existing: Any, middleware: Any) -> None:
        """Insert ``middleware`` immediately after ``existing``."""
        self._change(lambda e: _insert(e, self._index(e, existing) + 1, _load(middleware)))

    def remove(self, middleware: Any) -> None:
        """Remove every entry ``middleware`` identifies (class, object or dotted path)."""
        self._change(lambda e: [x for x in e if not _matches(x, middleware)])

    # ------------------------------------------------------------------ §5.4

    def entries(self) -> list[Any]:
        """The middleware in order (a copy)."""
        return list(self._entries)

    def names(self) -> list[str]:
        """Each entry's dotted path, in order (for logs and the manifest)."""
        return [_name(entry) for entry in self._entries]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.entries())

    def __len__(self) -> int:
        return len(self._entries)

    def freeze(self) -> None:
        self._frozen = True

    @property
    def frozen(self) -> bool:
        return self._frozen

    def _change(self, how: Callable[[list[Any]], list[Any]]) -> None:
        with self._lock:
            if self._frozen:
                raise ChainFrozen(
                    f"The {self.kind} middleware chain is in use: configure it at startup "
                    "(AppConfig.ready) or through its setting."
                )
            self._entries = how(self._entries)

    def _index(self, entries: list[Any], existing: Any) -> int:
        for index, entry in enumerate(entries):
            if _matches(entry, existing):
                return index
        raise ValueError(f"{_name(existing)} is not in the {self.kind} middleware chain")

    # ------------------------------------------------------------------ running

    def enqueue_needed(self) -> bool:
        """False when no entry has anything to do for the next push.

        An entry may define ``enqueue_needed()`` (no arguments) to say it would only pass
        the job on unchanged right now (``TraceContextMiddleware`` outside a trace): a
        push then skips the chain, and setting up the job's id for it, entirely.
        """
        self._frozen = True
        for entry in self._entries:
            needed = getattr(entry, "enqueue_needed", None)
            if needed is None or needed():
                return True
        return False

    def run_enqueue(self, job: JobSpec, push: EnqueueNext) -> JobSpec | None:
        """Pass ``job`` through the enqueue chain, then to ``push`` (§3, §7.1-7.2)."""
        self._frozen = True
        entries = self._entries
        if not entries:
            return push(job)

        def call(index: int, current: JobSpec) -> JobSpec | None:
            if current.id != job.id:
                raise MiddlewareError(
                    f"{_name(entries[index - 1])} changed the job's id (§3.5 forbids it)."
                )
            if index == len(entries):
                return push(current)
            return entries[index](current, lambda nxt: call(index + 1, nxt))  # type: ignore[no-any-return]

        return call(0, job)

    def run_execution(self, job: Mapping[str, Any], ctx: Any, handler: ExecutionNext) -> Any:
        """Run ``handler`` inside the execution chain, first entry outermost (§4.2)."""
        self._frozen = True
        entries = self._entries
        if not entries:
            return handler()

        def call(index: int) -> Any:
            if index == len(entries):
                return handler()
            called = False

            def nxt() -> Any:
                nonlocal called
                if called:
                    raise MiddlewareError(f"{_name(entries[index])} called next() twice.")
                called = True
                return call(index + 1)

            return entries[index](job, ctx, nxt)

        return call(0)


def _insert(entries: list[Any], index: int, middleware: Any) -> list[Any]:
    return [*entries[:index], middleware, *entries[index:]]


def _load(entry: Any) -> Any:
    """An entry from a dotted path (a class is instantiated once) or an object."""
    obj = import_string(entry) if isinstance(entry, str) else entry
    if isinstance(obj, type):
        obj = obj()
    if not callable(obj):
        raise TypeError(f"middleware {entry!r} is not callable")
    return obj


def _name(entry: Any) -> str:
    if isinstance(entry, str):
        return entry
    plain = isinstance(entry, type) or inspect.isfunction(entry) or inspect.ismethod(entry)
    target = entry if plain else type(entry)
    return f"{target.__module__}.{target.__qualname__}"


def _matches(entry: Any, wanted: Any) -> bool:
    if entry is wanted:
        return True
    if isinstance(wanted, type) and isinstance(entry, wanted):
        return True
    if isinstance(wanted, str):
        return _name(entry) == wanted
    return False


# ---------------------------------------------------------------------- the two chains

_chains: dict[str, Chain] = {}
_chains_lock = threading.Lock()
SETTINGS = {"enqueue": "OJS_ENQUEUE_MIDDLEWARE", "execution": "OJS_EXECUTION_MIDDLEWARE"}


def _chain(kind: str) -> Chain:
    chain = _chains.get(kind)
    if chain is None:
        with _chains_lock:
            chain = _chains.get(kind)
            if chain is None:
                paths = getattr(settings, SETTINGS[kind].removeprefix("OJS_"))
                chain = Chain(kind, [_load(path) for path in paths])
                _chains[kind] = chain
    return chain


def enqueue_chain() -> Chain:
    """The enqueue chain (``OJS_ENQUEUE_MIDDLEWARE``), built on first use."""
    return _chain("enqueue")


def execution_chain() -> Chain:
    """The execution chain (``OJS_EXECUTION_MIDDLEWARE``), built on first use."""
    return _chain("execution")


def _rebuild(*, setting: str, **_: Any) -> None:
    for kind, name in SETTINGS.items():
        if setting == name:
            _chains.pop(kind, None)


setting_changed.connect(_rebuild, dispatch_uid="django_ojs.middleware.rebuild")


# ---------------------------------------------------------------------- built-ins


class TraceContextMiddleware:
    """W3C trace context across the queue (§8.1.5), on both chains.

    Enqueue: when the enqueuing code runs in a trace (a request under
    :class:`~django_ojs.tracing.TraceContextRequestMiddleware`, an OJS API request, or a
    job), ``meta.traceparent`` (and ``meta.tracestate``) gets a new span of that trace;
    a ``traceparent`` already in ``meta`` is kept. Execution: the handler runs in a child
    span of the stored one (:func:`django_ojs.tracing.current`, log records through
    :class:`~django_ojs.tracing.TraceContextFilter`); ``ctx.trace`` is that context.
    """

    def __call__(self, job: Any, *rest: Any) -> Any:
        if len(rest) == 1:
            return self.enqueue(job, rest[0])
        return self.execute(job, rest[0], rest[1])

    def enqueue_needed(self) -> bool:
        return tracing.current() is not None

    def enqueue(self, job: JobSpec, next: EnqueueNext) -> JobSpec | None:
        context = tracing.current()
        if context is None or "traceparent" in job.meta:
            return next(job)
        span = context.child()
        meta = {**job.meta, "traceparent": span.traceparent}
        if span.tracestate:
            meta["tracestate"] = span.tracestate
        return next(replace(job, meta=meta))

    def execute(self, job: Mapping[str, Any], ctx: Any, next: ExecutionNext) -> Any:
        meta = job.get("meta") or {}
        parent = tracing.parse(meta.get("traceparent"), meta.get("tracestate"))
        context = parent.child() if parent is not None else tracing.TraceContext.new()
        ctx.trace = context
        with tracing.use(context, job_id=str(job.get("id") or "")):
            return next()


class LoggingMiddleware:
    """One structured log record per push and per attempt (§8.1.1), on both chains.

    Logger ``django_ojs.jobs``: ``enqueued`` (INFO), ``started`` (DEBUG), ``completed``
    (INFO), ``failed`` (WARNING), each with ``extra`` fields ``job_id``, ``job_type``,
    ``queue``, ``attempt``, ``duration_ms``, ``trace_id``. Costs nothing when the logger
    is disabled at that level.
    """

    def __call__(self, job: Any, *rest: Any) -> Any:
        if len(rest) == 1:
            return self.enqueue(job, rest[0])
        return self.execute(job, rest[0], rest[1])

    def enqueue(self, job: JobSpec, next: EnqueueNext) -> JobSpec | None:
        out = next(job)
        if logger.isEnabledFor(logging.INFO):
            fields = {"job_id": str(job.id), "job_type": job.type, "queue": job.queue}
            if out is None:
                logger.info("job %s (%s) dropped by middleware", job.id, job.type, extra=fields)
            else:
                logger.info("job %s (%s) enqueued on %s", job.id, job.type, job.queue,
                            extra={**fields, "trace_id": _trace_id(out.meta)})  # fmt: skip
        return out

    def execute(self, job: Mapping[str, Any], ctx: Any, next: ExecutionNext) -> Any:
        fields = {
            "job_id": str(job.get("id")),
            "job_type": job.get("type"),
            "queue": job.get("queue"),
            "attempt": ctx.attempt,
            "trace_id": _trace_id(job.get("meta") or {}),
        }
        logger.debug("job %s (%s) attempt %s started", fields["job_id"], fields["job_type"],
                     ctx.attempt, extra=fields)  # fmt: skip
        began = time.monotonic()
        try:
            result = next()
        except BaseException as exc:
            duration = round((time.monotonic() - began) * 1000, 3)
            logger.warning(
                "job %s (%s) attempt %s failed after %.1f ms: %s", fields["job_id"],
                fields["job_type"], ctx.attempt, duration, type(exc).__name__,
                extra={**fields, "duration_ms": duration, "error_type": type(exc).__name__},
            )  # fmt: skip
            raise
        duration = round((time.monotonic() - began) * 1000, 3)
        logger.info(
            "job %s (%s) attempt %s completed in %.1f ms", fields["job_id"], fields["job_type"],
            ctx.attempt, duration, extra={**fields, "duration_ms": duration},
        )  # fmt: skip
        return result


def _trace_id(meta: dict[str, Any]) -> str | None:
    context = tracing.parse(meta.get("traceparent"))
    return context.trace_id if context is not None else None
