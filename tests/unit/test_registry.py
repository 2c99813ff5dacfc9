"""The handler registry: registration rules, context detection, discovery."""

from __future__ import annotations

import asyncio
import sys

import pytest

import django_ojs
from django_ojs.context import JobCancelled, JobContext, JobError
from django_ojs.exceptions import ValidationError
from django_ojs.registry import HandlerAlreadyRegistered, Registry, autodiscover, registry
from django_ojs.worker import execution


def test_register__plain_function_gets_args_positionally():
    reg = Registry()
    reg.register("email.send", lambda to, subject: (to, subject))
    entry = reg.get("email.send")
    assert entry.context is None and not entry.is_async
    args, kwargs = entry.call_args(["a@example.com", "hi"], ctx=object())
    assert args == ("a@example.com", "hi") and kwargs == {}


@pytest.mark.parametrize("name", ["ctx", "context"])
def test_register__first_parameter_named_ctx_receives_the_context(name):
    reg = Registry()
    namespace: dict = {}
    exec(f"def handle({name}, a, b):\n    return a + b", namespace)  # builds the parameter name
    reg.register("demo.add", namespace["handle"])
    entry = reg.get("demo.add")
    ctx = object()
    assert entry.context == "positional"
    assert entry.call_args([1, 2], ctx) == ((ctx, 1, 2), {})


def test_register__annotation_or_keyword_only_context():
    reg = Registry()

    def annotated(job: JobContext, a):
        return a

    def keyword(a, *, ctx):
        return a

    reg.register("a.b", annotated)
    reg.register("a.c", keyword)
    ctx = object()
    assert reg.get("a.b").call_args([1], ctx) == ((ctx, 1), {})
    assert reg.get("a.c").call_args([1], ctx) == ((1,), {"ctx": ctx})


def test_register__context_parameter_in_the_middle_is_refused():
    def bad(a, ctx):
        return a

    with pytest.raises(TypeError, match="first parameter or keyword-only"):
        Registry().register("a.b", bad)


def test_register__async_handlers_are_detected():
    async def handle(x):
        return x

    reg = Registry()
    reg.register("a.b", handle)
    assert reg.get("a.b").is_async


def test_register__second_function_for_a_type_is_refused_unless_replace():
    reg = Registry()

    def first():
        return 1

    def second():
        return 2

    reg.register("a.b", first)
    reg.register("a.b", first)  # the same function again (module re-import) is fine
    with pytest.raises(HandlerAlreadyRegistered, match="first"):
        reg.register("a.b", second)
    reg.register("a.b", second, replace=True)
    assert reg.get("a.b").func is second
    reg.unregister("a.b")
    assert "a.b" not in reg and len(reg) == 0


@pytest.mark.parametrize("bad", ["", "Email.Send", "email..send", "1email"])
def test_register__job_type_must_be_valid(bad):
    with pytest.raises(ValidationError):
        Registry().register(bad, lambda: None)


def test_register__handler_must_be_callable():
    with pytest.raises(TypeError):
        Registry().register("a.b", "not callable")  # type: ignore[arg-type]


def test_handler_decorator__registers_in_the_global_registry_and_returns_the_function():
    @django_ojs.handler("unit.registry_decorator", replace=True)
    def handle(x):
        return x * 2

    try:
        assert handle(2) == 4
        assert registry.get("unit.registry_decorator").func is handle
        assert "unit.registry_decorator" in registry.types()
    finally:
        registry.unregister("unit.registry_decorator")


def test_autodiscover__imports_the_handler_module_of_installed_apps(settings):
    settings.INSTALLED_APPS = [*settings.INSTALLED_APPS, "example_project"]
    sys.modules.pop("example_project.jobs", None)
    saved = {t: registry.get(t) for t in registry.types()}
    try:
        autodiscover(("jobs",))
        assert {"test.echo", "test.noop", "test.slow", "test.panic"} <= set(registry.types())
    finally:
        for job_type in registry.types():
            if job_type not in saved:
                registry.unregister(job_type)


# --------------------------------------------------------------------------- execution


def _run(func, args, ctx=None):
    reg = Registry()
    reg.register("unit.run", func)
    return execution.run(reg.get("unit.run"), args, ctx or JobContext({"id": "x", "attempt": 1}))


def test_execution__return_value_becomes_the_result():
    outcome = _run(lambda a, b: {"sum": a + b}, [1, 2])
    assert outcome.ok and outcome.result == {"sum": 3}


def test_execution__exception_becomes_a_failure_with_type_message_and_backtrace():
    def deep(n):
        if n == 0:
            raise ValueError("boom")
        return deep(n - 1)

    outcome = _run(deep, [80])
    assert not outcome.ok
    error = outcome.error
    assert error["type"] == "ValueError" and error["message"] == "boom"
    assert error["code"] == "handler_error"
    assert 0 < len(error["backtrace"]) <= execution.MAX_FRAMES
    assert sum(len(line) for line in error["backtrace"]) <= execution.MAX_BACKTRACE_CHARS
    assert "raise ValueError" in error["backtrace"][-1]


def test_execution__custom_exception_type_names_its_module():
    class PaymentDeclined(Exception):
        pass

    def handle():
        raise PaymentDeclined("card declined")

    outcome = _run(handle, [])
    assert outcome.error["type"].endswith("PaymentDeclined")
    assert outcome.error["type"].startswith("tests.unit.test_registry.")


def test_execution__job_error_chooses_type_and_retryability():
    def handle():
        raise JobError("expired token", type="auth.expired", retryable=False, details={"a": 1})

    error = _run(handle, []).error
    assert error["type"] == "auth.expired" and error["retryable"] is False
    assert error["details"] == {"a": 1}


def test_execution__non_json_result_is_a_non_retryable_failure():
    outcome = _run(lambda: {1, 2}, [])
    assert not outcome.ok
    assert outcome.error["type"] == "invalid_result" and outcome.error["retryable"] is False


def test_execution__async_handler_runs_and_can_be_cancelled_through_asyncio():
    async def quick(x):
        await asyncio.sleep(0)
        return x

    assert _run(quick, [5]).result == 5

    async def forever():
        await asyncio.sleep(3600)

    ctx = JobContext({"id": "x", "attempt": 1})
    import threading

    timer = threading.Timer(
        0.05, lambda: ctx.cancel("timeout", error={"type": "timeout", "message": "t"})
    )
    timer.start()
    outcome = _run(forever, [], ctx)
    timer.join()
    assert not outcome.ok and outcome.error == {"type": "timeout", "message": "t"}


def test_execution__cooperative_cancellation_uses_the_cancel_error():
    ctx = JobContext({"id": "x", "attempt": 1})
    ctx.cancel("shutdown", error={"type": "shutdown", "message": "bye"}, requeue=True)

    def handle(ctx):
        ctx.raise_if_cancelled()

    outcome = _run(handle, [], ctx)
    assert outcome.error["type"] == "shutdown" and outcome.requeue


def test_execution__job_cancelled_without_a_cancel_error_is_a_plain_failure():
    def handle():
        raise JobCancelled("stop")

    assert _run(handle, []).error["type"] == "django_ojs.context.JobCancelled"


def test_context__progress_accepts_fractions_and_percentages():
    reports = []
    ctx = JobContext({"id": "x", "attempt": 2}, progress=lambda v, m, d: reports.append((v, m)))
    ctx.progress(0.5, "half")
    ctx.progress(75)
    assert reports == [(0.5, "half"), (0.75, None)]
    assert ctx.attempt == 2 and ctx.job_id == "x"
    with pytest.raises(ValueError):
        ctx.progress(150)
    with pytest.raises(TypeError):
        ctx.progress("half")  # type: ignore[arg-type]


def test_context__heartbeat_reports_cancellation_and_callbacks_run_once():
    beats = []
    ctx = JobContext({"id": "x", "attempt": 1}, beat=lambda: beats.append(1))
    called = []
    ctx.on_cancel(lambda: called.append("early"))
    assert ctx.heartbeat() is True
    ctx.cancel("cancelled")
    ctx.cancel("again")  # only the first request counts
    ctx.on_cancel(lambda: called.append("late"))  # runs at once when already cancelled
    assert ctx.heartbeat() is False and ctx.is_cancelled and ctx.cancel_reason == "cancelled"
    assert beats == [1, 1] and called == ["early", "late"]
    with pytest.raises(JobCancelled):
        ctx.raise_if_cancelled()


def test_context__the_cancellation_event_is_one_and_wakes_a_waiting_handler():
    import threading

    ctx = JobContext({"id": "x", "attempt": 1})
    assert not ctx.is_cancelled and ctx.cancelled is ctx.cancelled  # one Event, made once
    woke = []
    waiter = threading.Thread(target=lambda: woke.append(ctx.cancelled.wait(30)))
    waiter.start()
    ctx.cancel("timeout")
    waiter.join(30)
    assert woke == [True]
    # Cancelled before anyone looked: the Event a handler gets first is already set.
    early = JobContext({"id": "y", "attempt": 1})
    early.cancel("shutdown")
    assert early.cancelled.is_set() and early.is_cancelled


def test_context__job_envelope_is_built_lazily():
    calls = []

    def load():
        calls.append(1)
        return {"id": "x", "type": "a.b", "args": [1], "meta": {"k": "v"}}

    ctx = JobContext(load, job_id="x", attempt=1)
    assert calls == []
    assert ctx.type == "a.b" and ctx.args == [1] and ctx.meta == {"k": "v"}
    assert calls == [1]
