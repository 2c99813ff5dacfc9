"""Job type → Python handler registry: ``@handler("email.send")`` and handler discovery.

Holds functions and how to call them; it never touches the database. Handler modules
(``<app>.jobs`` by default, ``OJS_HANDLER_MODULES``) are imported from every installed app
when Django starts, so the decorators run before a worker fetches anything.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from django_ojs import envelope
from django_ojs.context import JobContext

F = TypeVar("F", bound=Callable[..., Any])

#: Parameter names that ask for a :class:`~django_ojs.context.JobContext`.
CONTEXT_NAMES = frozenset({"ctx", "context"})


class HandlerAlreadyRegistered(ValueError):
    """Another function is already registered for this job type."""


@dataclass(frozen=True)
class Handler:
    """A registered function and how the worker passes the context to it."""

    type: str
    func: Callable[..., Any]
    #: ``None`` (no context), ``"positional"`` (first argument) or ``"keyword"``.
    context: Literal["positional", "keyword"] | None
    context_name: str | None
    is_async: bool

    def call_args(self, args: list[Any], ctx: JobContext) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Positional and keyword arguments for one call with the job's ``args``."""
        if self.context == "positional":
            return (ctx, *args), {}
        if self.context == "keyword":
            return tuple(args), {self.context_name or "ctx": ctx}
        return tuple(args), {}

    @property
    def name(self) -> str:
        return f"{self.func.__module__}.{getattr(self.func, '__qualname__', self.func)}"


def _context_param(
    func: Callable[..., Any],
) -> tuple[Literal["positional", "keyword"] | None, str | None]:
    """Find the parameter that asks for the context: named ``ctx``/``context`` or annotated
    ``JobContext``. Only the first parameter or a keyword-only one may ask."""
    try:
        params = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        return None, None
    for index, param in enumerate(params):
        annotation = param.annotation
        annotated = annotation is not inspect.Parameter.empty and (
            getattr(annotation, "__name__", None) == "JobContext"
            or (isinstance(annotation, str) and annotation.rsplit(".", 1)[-1] == "JobContext")
        )
        if not annotated and param.name not in CONTEXT_NAMES:
            continue
        if param.kind is inspect.Parameter.KEYWORD_ONLY:
            return "keyword", param.name
        if index == 0 and param.kind in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        ):
            return "positional", param.name
        raise TypeError(
            f"{func.__qualname__}: the context parameter {param.name!r} must be the first "
            "parameter or keyword-only"
        )
    return None, None


class Registry:
    """A thread-safe mapping of job type to :class:`Handler`."""

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}
        self._resolvers: list[Callable[[str], Handler | None]] = []
        self._lock = threading.Lock()

    def register(self, job_type: str, func: Callable[..., Any], *, replace: bool = False) -> None:
        envelope.validate_type(job_type)  # same rule as the envelope's `type`
        if not callable(func):
            raise TypeError(f"handler for {job_type!r} must be callable")
        context, name = _context_param(func)
        entry = Handler(
            type=job_type,
            func=func,
            context=context,
            context_name=name,
            is_async=inspect.iscoroutinefunction(func),
        )
        with self._lock:
            current = self._handlers.get(job_type)
            # Re-importing the same module (autoreload) registers an equal function.
            if (
                current is not None
                and not replace
                and current.func is not func
                and current.name != entry.name
            ):
                raise HandlerAlreadyRegistered(
                    f"job type {job_type!r} already has a handler: {current.name}"
                )
            self._handlers[job_type] = entry

    def unregister(self, job_type: str) -> None:
        with self._lock:
            self._handlers.pop(job_type, None)

    def get(self, job_type: str) -> Handler | None:
        found = self._handlers.get(job_type)
        if found is None and self._resolvers:
            for resolve in self._resolvers:
                found = resolve(job_type)
                if found is not None:
                    with self._lock:
                        self._handlers.setdefault(job_type, found)
                    break
        return found

    def add_resolver(self, resolve: Callable[[str], Handler | None]) -> None:
        """Find handlers the decorator did not register (Django tasks: ``django_ojs.tasks``).

        Asked, in order, for a job type without a registered handler; what one returns is
        kept for that type.
        """
        with self._lock:
            if resolve not in self._resolvers:
                self._resolvers.append(resolve)

    def types(self) -> list[str]:
        return sorted(self._handlers)

    def __contains__(self, job_type: object) -> bool:
        return job_type in self._handlers

    def __len__(self) -> int:
        return len(self._handlers)


#: The process-wide registry the worker reads.
registry = Registry()


def handler(job_type: str, *, replace: bool = False) -> Callable[[F], F]:
    """Register the decorated function as the handler of ``job_type``.

    The function receives the job's ``args`` positionally. A first parameter named ``ctx``
    or ``context`` (or annotated :class:`~django_ojs.context.JobContext`), or a
    keyword-only one, receives the job context. ``async def`` handlers are supported. The
    return value (JSON-native) becomes the job's result::

        @django_ojs.handler("email.send")
        def send_email(to, subject):
            ...
    """

    def decorate(func: F) -> F:
        registry.register(job_type, func, replace=replace)
        return func

    return decorate


#: Cron jobs declared with :func:`periodic`, by name (synced to the database at startup).
_periodic: dict[str, dict[str, Any]] = {}


def periodic(
    expression: str,
    *,
    name: str | None = None,
    args: list[Any] | tuple[Any, ...] = (),
    timezone: str = "UTC",
    overlap_policy: str | None = None,
    description: str | None = None,
    type: str | None = None,
    **options: Any,
) -> Callable[[F], F]:
    """Declare a cron job that enqueues the decorated handler's job type on a schedule.

    Put it above :func:`handler`; ``name`` defaults to the job type. ``options`` are job
    options (``queue``, ``priority``, ``retry``, ``meta``...). Workers and reapers store
    the declaration at startup (an operator's pause in the admin is kept)::

        @django_ojs.periodic("0 3 * * *", timezone="Europe/Paris", queue="reports")
        @django_ojs.handler("report.nightly")
        def nightly_report():
            ...
    """

    def decorate(func: F) -> F:
        job_type = type
        if job_type is None:
            job_type = next((h.type for h in registry._handlers.values() if h.func is func), None)
        if job_type is None:
            raise TypeError(
                "@periodic needs the handler's job type: put it above @handler, or pass type="
            )
        entry_name = name or job_type.lower().replace("_", "-")
        _periodic[entry_name] = {
            "cron": expression, "type": job_type, "args": list(args), "timezone": timezone,
            "overlap_policy": overlap_policy, "description": description,
            "options": options,
        }  # fmt: skip
        return func

    return decorate


def periodic_entries() -> dict[str, dict[str, Any]]:
    """The cron jobs declared with :func:`periodic` in the modules imported so far."""
    return {name: dict(spec) for name, spec in _periodic.items()}


def autodiscover(module_names: tuple[str, ...] | None = None) -> None:
    """Import ``<app>.<name>`` for every installed app and every handler module name."""
    from django.utils.module_loading import autodiscover_modules

    from django_ojs.conf import settings

    names = settings.HANDLER_MODULES if module_names is None else module_names
    if names:
        autodiscover_modules(*names)
