"""Django's task framework on OJS: ``TASKS = {"default": {"BACKEND": "django_ojs.tasks.OJSBackend"}}``.

Works with ``django.tasks`` (Django 6.x) and with the ``django-tasks`` backport on Django
5.2; :data:`tasks_api` is the one place that tells them apart.

* ``my_task.enqueue(*args, **kwargs)`` writes an OJS job **in the caller's transaction**
  (through :func:`django_ojs.lifecycle.push`, so the enqueue middleware runs): type = the
  task's module path, ``args = [{"args": [...], "kwargs": {...}}]``, queue =
  ``queue_name``, priority = the task's (both scales are -100 to 100, higher first),
  ``scheduled_at`` = ``run_after``.
* ``manage.py ojs_worker`` runs it: a job type that no ``@django_ojs.handler`` claims
  and that names a ``Task`` of an installed app is run as that task (with Django's
  ``TaskContext`` when ``takes_context``), sending ``task_started``/``task_finished``.
* ``get_result(id)`` maps the OJS job back to a ``TaskResult``.

OJS options (retry policy, timeout, unique policy, result TTL, rate limit, tags) come from
the backend's ``OPTIONS`` and, per task, from ``@task(ojs={...})``.

The job's tenant (multi-tenancy §5) is the task's ``meta.tenant_id`` when it sets one,
else the backend's ``OPTIONS["TENANT"]`` (a tenant id), else what
``OPTIONS["TENANT_FUNCTION"]`` (a dotted path to a function of no arguments) returns at
enqueue time, else the current one (``with django_ojs.tenant("acme"): ...``).
"""

from __future__ import annotations

import importlib
import logging
import traceback
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import SimpleNamespace
from typing import Any

from django.apps import apps
from django.utils.module_loading import import_string

from django_ojs import lifecycle
from django_ojs.exceptions import OJSError
from django_ojs.models import Job
from django_ojs.registry import Handler, registry
from django_ojs.states import JobState
from django_ojs.tenancy import validate_tenant

logger = logging.getLogger(__name__)


def _load_api() -> SimpleNamespace:
    """``django.tasks`` (Django 6+) or the ``django_tasks`` backport: the same API under
    two names (``InvalidTask`` is ``InvalidTaskError`` in the backport)."""
    try:
        root = importlib.import_module("django.tasks")
        invalid = "InvalidTask"
    except ImportError:
        root = importlib.import_module("django_tasks")
        invalid = "InvalidTaskError"
    name = root.__name__
    base = importlib.import_module(f"{name}.base")
    backends = importlib.import_module(f"{name}.backends.base")
    exceptions = importlib.import_module(f"{name}.exceptions")
    signals = importlib.import_module(f"{name}.signals")
    return SimpleNamespace(
        Task=base.Task,
        TaskContext=base.TaskContext,
        TaskResult=base.TaskResult,
        Status=base.TaskResultStatus,
        TaskError=base.TaskError,
        BaseTaskBackend=backends.BaseTaskBackend,
        InvalidTask=getattr(exceptions, invalid),
        TaskResultDoesNotExist=exceptions.TaskResultDoesNotExist,
        task_backends=root.task_backends,
        task_enqueued=signals.task_enqueued,
        task_started=signals.task_started,
        task_finished=signals.task_finished,
    )


tasks_api = _load_api()

#: OJS state → Django ``TaskResultStatus`` name.
STATUS = {
    JobState.SCHEDULED: "READY",
    JobState.AVAILABLE: "READY",
    JobState.PENDING: "READY",
    JobState.RETRYABLE: "READY",
    JobState.ACTIVE: "RUNNING",
    JobState.COMPLETED: "SUCCESSFUL",
    JobState.DISCARDED: "FAILED",
    JobState.CANCELLED: "FAILED",
}
#: OJS options a task may set (backend OPTIONS, or ``@task(ojs={...})``).
OPTIONS = ("retry", "timeout", "unique", "result_ttl", "rate_limit", "tags", "meta",
           "expires_at", "total_timeout", "heartbeat_timeout", "grace_period")  # fmt: skip
#: The backend's own OPTIONS: its database alias, and the tenant of its jobs.
BACKEND_OPTIONS = ("DATABASE", "TENANT", "TENANT_FUNCTION")


@dataclass(frozen=True, slots=True, kw_only=True)
class OJSTask(tasks_api.Task):  # type: ignore[misc,name-defined]
    """A Django task with OJS options: ``@task(ojs={"retry": {"max_attempts": 5}})``."""

    ojs: Mapping[str, Any] = field(default_factory=dict)


class OJSBackend(tasks_api.BaseTaskBackend):  # type: ignore[misc,name-defined]
    """Runs Django tasks as OJS jobs (see the module docstring)."""

    task_class = OJSTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        unknown = sorted(set(self.options) - set(OPTIONS) - set(BACKEND_OPTIONS))
        if unknown:
            raise tasks_api.InvalidTask(
                f"Unknown OPTIONS for {alias!r}: {', '.join(unknown)} (allowed: {', '.join(OPTIONS)})"
            )
        self.using: str | None = self.options.get("DATABASE")
        self.tenant: str | None = self.options.get("TENANT")
        if self.tenant is not None:
            try:
                validate_tenant(self.tenant, field="TENANT")
            except OJSError as exc:
                raise tasks_api.InvalidTask(f"OPTIONS of {alias!r}: {exc.message}") from exc
        path = self.options.get("TENANT_FUNCTION")
        self.tenant_function: Callable[[], str | None] | None = (
            import_string(path) if path else None
        )

    # ------------------------------------------------------------------ enqueue

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        self.validate_task(task)
        options = {k: v for k, v in self.options.items() if k in OPTIONS}
        options.update(getattr(task, "ojs", None) or {})
        meta = {**options.pop("meta", {}), "django_task": {"backend": self.alias}}
        tenant = self.tenant
        if tenant is None and self.tenant_function is not None:
            tenant = self.tenant_function()
        if tenant and "tenant_id" not in meta:
            meta["tenant_id"] = tenant
        try:
            spec = lifecycle.job_spec(
                task.module_path,
                [{"args": list(args), "kwargs": dict(kwargs)}],
                queue=task.queue_name,
                priority=task.priority,
                scheduled_at=task.run_after,
                meta=meta,
                **options,
            )
        except OJSError as exc:
            raise tasks_api.InvalidTask(f"{task.module_path}: {exc.message}") from exc
        job = lifecycle.push(spec, using=self.using)
        if getattr(job, "dropped", False):
            raise tasks_api.InvalidTask(f"{task.module_path}: enqueue middleware dropped the job")
        result = self._result(job, task)
        tasks_api.task_enqueued.send(type(self), task_result=result)
        return result

    # ------------------------------------------------------------------ results

    def get_result(self, result_id: str) -> Any:
        try:
            pk = uuid.UUID(str(result_id))
        except ValueError:
            raise tasks_api.TaskResultDoesNotExist(result_id) from None
        job = Job.objects.using(lifecycle.database(self.using)).filter(pk=pk).first()
        if job is None:
            raise tasks_api.TaskResultDoesNotExist(result_id)
        task = resolve_task(job.type)
        if task is None:
            raise tasks_api.TaskResultDoesNotExist(result_id)
        return self._result(job, task)

    def _result(self, job: Any, task: Any) -> Any:
        payload = job.args[0] if job.args and isinstance(job.args[0], dict) else {}
        finished = job.completed_at or job.discarded_at or job.cancelled_at
        result = tasks_api.TaskResult(
            task=task,
            id=str(job.id),
            status=getattr(tasks_api.Status, STATUS[JobState(job.state)]),
            enqueued_at=job.enqueued_at,
            started_at=job.started_at,
            finished_at=finished if job.state in _FINISHED else None,
            last_attempted_at=job.started_at,
            args=list(payload.get("args", [])),
            kwargs=dict(payload.get("kwargs", {})),
            backend=self.alias,
            errors=[_task_error(entry) for entry in (job.errors or [])],
            worker_ids=[str(job.worker_id or "")] * int(job.attempt or 0),
        )
        if job.state == JobState.COMPLETED:
            object.__setattr__(result, "_return_value", job.result)
        return result


_FINISHED = {JobState.COMPLETED, JobState.DISCARDED, JobState.CANCELLED}


def _task_error(entry: Mapping[str, Any]) -> Any:
    nested = entry.get("error")
    error: Mapping[str, Any] = nested if isinstance(nested, dict) else entry
    kind = str(error.get("type") or "Exception")
    path = kind if "." in kind else f"builtins.{kind}"
    lines = error.get("backtrace") or []
    trace = "\n".join(lines) if isinstance(lines, list) else str(lines)
    message = str(error.get("message") or "")
    return tasks_api.TaskError(
        exception_class_path=path, traceback=f"{trace}\n{kind}: {message}".strip()
    )


# ---------------------------------------------------------------------- the worker side


def resolve_task(job_type: str) -> Any:
    """The ``Task`` a job type names, or ``None``.

    Only a dotted path into an installed app's module that names a ``Task`` instance is
    imported: job data never makes the worker import arbitrary modules.
    """
    module, _, name = job_type.rpartition(".")
    if not module or not name.isidentifier():
        return None
    if apps.get_containing_app_config(module) is None:
        return None
    try:
        candidate = import_string(job_type)
    except ImportError:
        return None
    except Exception:
        # A task module that fails to import must not stop the worker: the job fails
        # with "no handler" and the traceback is in the log.
        logger.exception("could not import the task %s", job_type)
        return None
    return candidate if isinstance(candidate, tasks_api.Task) else None


def task_handler(job_type: str) -> Handler | None:
    """A registry resolver: the handler that runs the Django task ``job_type``."""
    task = resolve_task(job_type)
    if task is None:
        return None
    backend = tasks_api.task_backends[task.backend]
    if not isinstance(backend, OJSBackend):
        return None
    return Handler(job_type, _runner(task, backend), "positional", "ctx", False)


def _runner(task: Any, backend: OJSBackend) -> Callable[..., Any]:
    def run(ctx: Any, payload: Any = None) -> Any:
        payload = payload if isinstance(payload, dict) else {}
        args, kwargs = list(payload.get("args", [])), dict(payload.get("kwargs", {}))
        job = ctx.job
        result = tasks_api.TaskResult(
            task=task, id=str(job.get("id")), status=tasks_api.Status.RUNNING,
            enqueued_at=_parse(job.get("enqueued_at")), started_at=_parse(job.get("started_at")),
            finished_at=None, last_attempted_at=_parse(job.get("started_at")), args=args,
            kwargs=kwargs, backend=backend.alias, errors=[],
            worker_ids=[str(ctx.worker_id or "")] * max(1, int(ctx.attempt or 1)),
        )  # fmt: skip
        tasks_api.task_started.send(type(backend), task_result=result)
        try:
            if task.takes_context:
                value = task.call(tasks_api.TaskContext(task_result=result), *args, **kwargs)
            else:
                value = task.call(*args, **kwargs)
        except BaseException as exc:
            if int(ctx.attempt or 1) >= int(job.get("max_attempts") or 1):
                cls = type(exc)
                result.errors.append(
                    tasks_api.TaskError(
                        exception_class_path=f"{cls.__module__}.{cls.__qualname__}",
                        traceback="".join(traceback.format_exception(exc)),
                    )
                )
                object.__setattr__(result, "status", tasks_api.Status.FAILED)
                tasks_api.task_finished.send(type(backend), task_result=result)
            raise
        object.__setattr__(result, "status", tasks_api.Status.SUCCESSFUL)
        object.__setattr__(result, "_return_value", value)
        tasks_api.task_finished.send(type(backend), task_result=result)
        return value

    return run


def _parse(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    from django_ojs.envelope import parse_timestamp

    return parse_timestamp(value, "timestamp")


def wait(result: Any, timeout: float = 30.0) -> Any:
    """Block until the task behind ``result`` (a ``TaskResult``) finishes, then refresh it.

    Wakes on the job's completion (LISTEN/NOTIFY on PostgreSQL, polling on SQLite) like
    :func:`django_ojs.wait`; raises :class:`~django_ojs.exceptions.WaitTimeout` when it
    is still running after ``timeout`` seconds. Returns ``result``, refreshed.
    """
    lifecycle.wait(result.id, timeout, using=tasks_api.task_backends[result.backend].using)
    result.refresh()
    return result


def install() -> None:
    """Let ``ojs_worker`` run Django tasks (called at startup when ``TASKS`` uses us)."""
    registry.add_resolver(task_handler)
