"""Run one handler call and turn what happened into an :class:`Outcome`.

Shared by the thread pool and the child processes of the process pool. Knows nothing
about the database: the worker records outcomes through ``lifecycle``. The
:class:`~django_ojs.worker.messages.Outcome` it returns is defined with the pool's messages.
"""

from __future__ import annotations

import asyncio
import traceback
from typing import Any

from django_ojs import failure, middleware, tenancy, validation
from django_ojs.context import JobCancelled, JobContext, JobError
from django_ojs.exceptions import NotStorable, ValidationError
from django_ojs.registry import Handler
from django_ojs.tenancy import tenant_of
from django_ojs.worker.messages import Outcome

#: An exception's backtrace keeps the innermost frames (failure entries stay readable).
MAX_FRAMES = 50
MAX_BACKTRACE_CHARS = 10_000


def format_backtrace(exc: BaseException) -> list[str]:
    """The innermost frames of ``exc``'s traceback, at most 50 and 10,000 characters."""
    frames = traceback.extract_tb(exc.__traceback__)
    # Drop the worker's own frames above the handler.
    while len(frames) > 1 and frames[0].filename == __file__:
        frames = traceback.StackSummary.from_list(list(frames)[1:])
    lines = [line.rstrip("\n") for line in traceback.format_list(list(frames)[-MAX_FRAMES:])]
    out: list[str] = []
    used = 0
    for line in reversed(lines):
        if used + len(line) > MAX_BACKTRACE_CHARS:
            break
        out.append(line)
        used += len(line)
    out.reverse()
    return out


def error_type(exc: BaseException) -> str:
    """``ValueError`` for built-ins, ``module.Class`` for everything else."""
    cls = type(exc)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def exception_error(exc: BaseException) -> dict[str, Any]:
    """The FAIL error for an exception a handler raised."""
    if isinstance(exc, JobError):
        error: dict[str, Any] = {
            "code": "handler_error",
            "type": exc.type,
            "message": exc.message,
            "retryable": exc.retryable,
        }
        if exc.details:
            error["details"] = exc.details
    else:
        error = {
            "code": "handler_error",
            "type": error_type(exc),
            "message": str(exc) or type(exc).__name__,
        }
    backtrace = format_backtrace(exc)
    if backtrace:
        error["backtrace"] = backtrace
    return error


def timeout_error(
    limit_seconds: float, elapsed_seconds: float, grace_seconds: float, *, terminated: bool
) -> dict[str, Any]:
    """The error object of ojs-timeouts §8 for an execution timeout.

    ``terminated``: the handler ignored its cancellation signal for the whole grace
    period and was terminated (rather than stopping when asked).
    """
    message = f"Job execution exceeded timeout of {limit_seconds:g} seconds"
    if terminated:
        message += f"; terminated after a {grace_seconds:g} second grace period"
    return {
        "code": "timeout",
        "type": "timeout",
        "message": message,
        "timeout_kind": "execution",
        "limit_seconds": round(limit_seconds, 3),
        "elapsed_seconds": round(elapsed_seconds, 3),
    }


def shutdown_error(grace_seconds: float) -> dict[str, Any]:
    """Worker protocol §7.2(5a): leftovers of a shutdown fail with type ``shutdown``."""
    return {
        "code": "handler_error",
        "type": "shutdown",
        "message": f"The worker shut down before the job finished "
        f"(shutdown grace period {grace_seconds:g} s)",
        "retryable": True,
    }


def no_handler_error(job_type: str) -> dict[str, Any]:
    """A job type without a handler fails for good (error catalog OJS-3010)."""
    return {
        "code": "handler_not_found",
        "type": "handler_not_found",
        "message": f"No handler is registered for job type {job_type!r}",
        "retryable": False,
    }


def crash_error(exitcode: int | None) -> dict[str, Any]:
    """A process-pool child died while running the handler."""
    return {
        "code": "handler_error",
        "type": "crash",
        "message": f"The handler process exited unexpectedly (exit code {exitcode})",
    }


def run(handler: Handler, args: list[Any], ctx: JobContext) -> Outcome:
    """Call ``handler`` with ``args`` (and ``ctx`` if it asks) inside the execution
    middleware (OJS middleware §4) and capture the outcome."""

    def invoke() -> Any:
        call_args, kwargs = handler.call_args(args, ctx)
        if handler.is_async:
            return _run_async(handler, call_args, kwargs, ctx)
        return handler.func(*call_args, **kwargs)

    try:
        chain = middleware.execution_chain()
        # The jobs the handler enqueues are its job's tenant's (multi-tenancy §15.2).
        with tenancy.use(tenant_of(ctx.summary.get("meta"))):
            result = chain.run_execution(ctx.view, ctx, invoke) if len(chain) else invoke()
    except (JobCancelled, asyncio.CancelledError) as exc:
        if ctx.cancel_error is not None:
            return Outcome(False, error=dict(ctx.cancel_error), requeue=ctx.cancel_requeue)
        return Outcome(False, error=exception_error(exc))
    except Exception as exc:
        return Outcome(False, error=exception_error(exc))
    try:
        result = validation.check_json(result, "result")
    except NotStorable as exc:
        return Outcome(False, error=failure.result_not_storable(exc.message))
    except ValidationError as exc:
        return Outcome(False, error=failure.invalid_result(exc.message))
    return Outcome(True, result=result)


def _run_async(
    handler: Handler, args: tuple[Any, ...], kwargs: dict[str, Any], ctx: JobContext
) -> Any:
    # One event loop per call: the handler owns it, and the cancellation signal becomes
    # asyncio cancellation of its task (timeouts §5.4: asyncio.Task.cancel() in Python).
    loop = asyncio.new_event_loop()
    try:
        task = loop.create_task(handler.func(*args, **kwargs))

        def cancel() -> None:
            loop.call_soon_threadsafe(task.cancel)

        ctx.on_cancel(cancel)
        return loop.run_until_complete(task)
    finally:
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()
