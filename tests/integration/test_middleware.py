"""Middleware chains (OJS middleware §3-§7): order, modification, drop and short-circuit,
errors, the five chain operations, and W3C trace context from a request to the worker."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest
from django.db import transaction
from django.test import RequestFactory

import django_ojs
from django_ojs import lifecycle, middleware, tracing
from django_ojs.context import JobContext
from django_ojs.exceptions import ValidationError
from django_ojs.models import Job
from django_ojs.registry import Handler
from django_ojs.worker import execution
from tests.integration.api_support import client

pytestmark = pytest.mark.django_db(transaction=True)

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE}-00f067aa0ba902b7-01"


# ----------------------------------------------------------------------------- enqueue


class Tag:
    """Appends its name to meta["order"]: shows the order the chain ran in."""

    name = "tag"

    def __call__(self, job, next):
        order = [*job.meta.get("order", []), self.name]
        return next(replace(job, meta={**job.meta, "order": order}))


class TagA(Tag):
    name = "a"


class TagB(Tag):
    name = "b"


class Boost:
    """Changes a field other middleware and the write see (§3.5)."""

    def __call__(self, job, next):
        return next(replace(job, priority=7, queue="boosted"))


def drop_ignored(job, next):
    """Drops jobs of type ``x.ignored`` (§7.2)."""
    return None if job.type == "x.ignored" else next(job)


def refuse_secret(job, next):
    if "secret" in job.meta:
        raise ValidationError("no secrets in meta", field="meta")
    return next(job)


def change_id(job, next):
    from uuid6 import uuid7

    return next(replace(job, id=uuid7()))


ENQUEUE = [
    "tests.integration.test_middleware.TagA",
    "tests.integration.test_middleware.TagB",
    "tests.integration.test_middleware.Boost",
    "tests.integration.test_middleware.drop_ignored",
    "tests.integration.test_middleware.refuse_secret",
]


@pytest.fixture
def chains(settings):
    settings.OJS_ENQUEUE_MIDDLEWARE = ENQUEUE
    yield
    # override_settings rebuilds the chains when the fixture restores the setting.


def test_enqueue_chain_runs_in_order_and_its_changes_are_written(chains):
    job = django_ojs.enqueue("x.work", [1])
    stored = Job.objects.get(pk=job.pk)
    assert stored.meta["order"] == ["a", "b"]
    assert (stored.priority, stored.queue) == (7, "boosted")
    assert middleware.enqueue_chain().names() == ENQUEUE


def test_a_dropped_job_is_not_written_and_not_an_error(chains):
    dropped = django_ojs.enqueue("x.ignored")
    assert dropped.dropped is True
    assert not Job.objects.exists()
    jobs = django_ojs.enqueue_many([{"type": "x.keep"}, {"type": "x.ignored"}, {"type": "x.two"}])
    assert [getattr(j, "dropped", False) for j in jobs] == [False, True, False]
    assert sorted(Job.objects.values_list("type", flat=True)) == ["x.keep", "x.two"]


def test_an_error_aborts_the_push_and_the_whole_batch(chains):
    with pytest.raises(ValidationError, match="no secrets"):
        django_ojs.enqueue("x.work", meta={"secret": 1})
    with pytest.raises(ValidationError):
        django_ojs.enqueue_many([{"type": "x.fine"}, {"type": "x.work", "meta": {"secret": 1}}])
    assert not Job.objects.exists()


def test_middleware_may_not_change_the_id(settings):
    settings.OJS_ENQUEUE_MIDDLEWARE = ["tests.integration.test_middleware.change_id"]
    with pytest.raises(middleware.MiddlewareError, match="changed the job's id"):
        django_ojs.enqueue("x.work")
    assert not Job.objects.exists()


def test_what_middleware_writes_is_validated_like_input(settings):
    settings.OJS_ENQUEUE_MIDDLEWARE = [lambda job, next: next(replace(job, queue="bad queue!"))]
    with pytest.raises(ValidationError) as caught:
        django_ojs.enqueue("x.work")
    assert caught.value.field == "queue"


def test_http_push_goes_through_the_chain_and_reports_drops(chains):
    api = client("admin")
    created = api.post("/jobs", {"type": "x.work", "args": []})
    assert created.status_code == 201
    assert created.body["job"]["meta"]["order"] == ["a", "b"]
    dropped = api.post("/jobs", {"type": "x.ignored", "args": []})
    assert (dropped.status_code, dropped.body["job"], dropped.body["dropped"]) == (200, None, True)
    batch = api.post("/jobs/batch", {"jobs": [{"type": "x.ignored", "args": []},
                                              {"type": "x.b", "args": []}]})  # fmt: skip
    assert batch.status_code == 201
    assert (batch.body["count"], batch.body["dropped"]) == (1, [0])
    assert Job.objects.count() == 2


def test_workflow_jobs_go_through_the_chain_and_may_not_be_dropped(chains):
    wf = django_ojs.chain(django_ojs.job("w.a"), django_ojs.job("w.b"))
    assert {tuple(j.meta["order"]) for j in wf.jobs.all()} == {("a", "b")}
    with pytest.raises(ValidationError, match="created whole"):
        django_ojs.group(django_ojs.job("w.c"), django_ojs.job("x.ignored"))
    assert wf.jobs.count() == 2


def test_enqueue_in_a_rolled_back_transaction_writes_nothing(chains):
    with pytest.raises(RuntimeError), transaction.atomic():
        django_ojs.enqueue("x.work")
        raise RuntimeError
    assert not Job.objects.exists()


# ----------------------------------------------------------------------------- chain ops


def test_chain_operations_identity_inspection_and_freezing():
    chain = middleware.Chain("enqueue")
    chain.add(TagA)
    chain.add("tests.integration.test_middleware.Boost")
    chain.prepend(TagB)
    chain.insert_before(Boost, drop_ignored)
    chain.insert_after(TagB, refuse_secret)
    assert chain.names() == [
        "tests.integration.test_middleware.TagB",
        "tests.integration.test_middleware.refuse_secret",
        "tests.integration.test_middleware.TagA",
        "tests.integration.test_middleware.drop_ignored",
        "tests.integration.test_middleware.Boost",
    ]
    chain.remove("tests.integration.test_middleware.TagA")  # by dotted path
    chain.remove(Boost)  # by class
    chain.add(TagA)
    chain.add(TagA)  # §6.4: duplicates allowed
    assert [type(e).__name__ for e in chain if isinstance(e, Tag)] == ["TagB", "TagA", "TagA"]
    with pytest.raises(ValueError, match="not in the enqueue middleware chain"):
        chain.insert_after(Boost, TagA)
    spec = lifecycle.job_spec("x.op")
    out = chain.run_enqueue(replace(spec, id=__import__("uuid6").uuid7()), lambda job: job)
    assert out.meta["order"] == ["b", "a", "a"]
    assert chain.frozen
    with pytest.raises(middleware.ChainFrozen):
        chain.add(Boost)


def test_empty_chains_call_straight_through(settings):
    settings.OJS_ENQUEUE_MIDDLEWARE = []
    settings.OJS_EXECUTION_MIDDLEWARE = []
    assert len(middleware.enqueue_chain()) == len(middleware.execution_chain()) == 0
    assert django_ojs.enqueue("x.plain").meta == {}
    assert _run(lambda: "done").result == "done"


# ----------------------------------------------------------------------------- execution


calls: list[str] = []


def outer(job, ctx, next):
    calls.append("outer:before")
    ctx.metadata["seen_by_outer"] = True
    result = next()
    calls.append("outer:after")
    return {"wrapped": result}


def inner(job, ctx, next):
    calls.append(f"inner:before:{ctx.metadata.get('seen_by_outer')}")
    result = next()
    calls.append("inner:after")
    return result


def short_circuit(job, ctx, next):
    if job["type"] == "x.cached":
        return "from cache"
    return next()


def twice(job, ctx, next):
    next()
    return next()


def _run(body, job_type: str = "x.exec"):
    def handler():
        calls.append("handler")
        return body()

    ctx = JobContext({"id": "j1", "type": job_type, "args": [], "meta": {}}, attempt=1)
    return execution.run(Handler(job_type, handler, None, None, False), [], ctx)


def test_execution_chain_nests_first_outermost(settings):
    settings.OJS_EXECUTION_MIDDLEWARE = [
        "tests.integration.test_middleware.outer",
        "tests.integration.test_middleware.inner",
    ]
    calls.clear()
    outcome = _run(lambda: 42)
    assert outcome.ok and outcome.result == {"wrapped": 42}
    assert calls == ["outer:before", "inner:before:True", "handler", "inner:after",
                     "outer:after"]  # fmt: skip


def test_execution_short_circuit_errors_and_next_twice(settings):
    settings.OJS_EXECUTION_MIDDLEWARE = [
        "tests.integration.test_middleware.outer",
        "tests.integration.test_middleware.short_circuit",
    ]
    calls.clear()
    outcome = _run(lambda: 1, "x.cached")
    assert outcome.result == {"wrapped": "from cache"}
    assert "handler" not in calls
    failed = _run(lambda: 1 / 0)
    assert not failed.ok and failed.error["type"] == "ZeroDivisionError"
    assert "outer:after" not in calls[calls.index("handler") :]  # the error passed through
    settings.OJS_EXECUTION_MIDDLEWARE = ["tests.integration.test_middleware.twice"]
    broken = _run(lambda: 1)
    assert not broken.ok and "called next() twice" in broken.error["message"]


# ----------------------------------------------------------------------------- tracing


def test_trace_from_a_request_reaches_the_workers_log(caplog, settings):
    settings.OJS_EXECUTION_MIDDLEWARE = [
        "django_ojs.middleware.TraceContextMiddleware",
        "django_ojs.middleware.LoggingMiddleware",
    ]
    api = client("admin")
    created = api.post(
        "/jobs", {"type": "x.traced", "args": []}, headers={"traceparent": TRACEPARENT}
    )
    assert created.status_code == 201
    stored = Job.objects.get(pk=created.body["job"]["id"])
    parent = tracing.parse(stored.meta["traceparent"])
    assert parent.trace_id == TRACE and parent.span_id != "00f067aa0ba902b7"
    # The worker side: the same chain (defaults) around the handler.
    (claimed,) = lifecycle.fetch(["default"], worker_id="w")
    seen = {}

    def handler(ctx):
        logging.getLogger("shop").warning("charging")
        seen["trace"] = tracing.current()
        return "ok"

    ctx = JobContext(claimed.to_wire(), attempt=claimed.attempt)
    trace_filter = tracing.TraceContextFilter()
    caplog.handler.addFilter(trace_filter)
    with caplog.at_level(logging.INFO):
        outcome = execution.run(Handler("x.traced", handler, "positional", "ctx", False), [], ctx)
    caplog.handler.removeFilter(trace_filter)
    assert outcome.ok
    assert seen["trace"].trace_id == TRACE and ctx.trace.trace_id == TRACE
    (line,) = [r for r in caplog.records if r.name == "shop"]
    assert (line.trace_id, line.job_id) == (TRACE, str(claimed.id))
    (done,) = [r for r in caplog.records if r.name == "django_ojs.jobs" and "completed" in r.msg]
    assert (done.trace_id, done.job_type, done.attempt) == (TRACE, "x.traced", 1)
    assert tracing.current() is None  # restored after the attempt


def test_django_request_middleware_carries_the_trace_into_enqueue():
    seen = {}

    def view(request):
        seen["job"] = django_ojs.enqueue("x.from_view")
        from django.http import HttpResponse

        return HttpResponse("ok")

    request = RequestFactory().get("/", HTTP_TRACEPARENT=TRACEPARENT)
    response = tracing.TraceContextRequestMiddleware(view)(request)
    assert tracing.parse(response["traceparent"]).trace_id == TRACE
    assert tracing.parse(seen["job"].meta["traceparent"]).trace_id == TRACE
    # Without a header a request starts its own trace; outside any, nothing is added.
    fresh = tracing.TraceContextRequestMiddleware(view)(RequestFactory().get("/"))
    assert tracing.parse(fresh["traceparent"]).trace_id != TRACE
    assert "traceparent" not in django_ojs.enqueue("x.outside").meta


def test_use_nests_and_restores_the_outer_trace_even_when_the_block_raises():
    outer, inner = tracing.TraceContext.new(), tracing.TraceContext.new()
    with tracing.use(outer, job_id="j-outer"):
        with pytest.raises(RuntimeError), tracing.use(inner, job_id="j-inner"):
            assert tracing.current() is inner
            record = logging.LogRecord("x", logging.INFO, __file__, 1, "m", None, None)
            tracing.TraceContextFilter().filter(record)
            assert (record.trace_id, record.job_id) == (inner.trace_id, "j-inner")
            raise RuntimeError("handler failed")
        assert tracing.current() is outer
        with tracing.use(None):  # no job id given: the outer one stays on log records
            record = logging.LogRecord("x", logging.INFO, __file__, 1, "m", None, None)
            tracing.TraceContextFilter().filter(record)
            assert (tracing.current(), record.job_id) == (None, "j-outer")
    assert tracing.current() is None


def test_new_traces_have_valid_distinct_ids_and_children_keep_the_trace():
    made = [tracing.TraceContext.new() for _ in range(1000)]
    assert len({c.trace_id for c in made}) == len({c.span_id for c in made}) == 1000
    for context in made[:50]:
        assert tracing.parse(context.traceparent) == context  # 32 + 16 hex digits, sampled
        child = context.child()
        assert (child.trace_id, child.sampled) == (context.trace_id, True)
        assert child.span_id != context.span_id
    with pytest.raises(AttributeError):
        made[0].trace_id = "0" * 32  # immutable


@pytest.mark.parametrize(
    "value",
    ["", "garbage", f"00-{'0' * 32}-00f067aa0ba902b7-01", f"00-{TRACE}-{'0' * 16}-01", 42],
)
def test_invalid_traceparents_are_ignored(value):
    assert tracing.parse(value) is None


def test_the_default_chain_costs_no_envelope_load_and_no_push_work():
    """Outside a trace the enqueue chain is skipped; the execution chain reads what the
    worker fetched (ctx.summary), never the full envelope (one query per job)."""
    assert middleware.enqueue_chain().names() == ["django_ojs.middleware.TraceContextMiddleware"]
    assert not middleware.enqueue_chain().enqueue_needed()
    with tracing.use(tracing.TraceContext.new()):
        assert middleware.enqueue_chain().enqueue_needed()

    def no_envelope():
        raise AssertionError("the envelope was loaded")

    summary = {"id": "j2", "type": "x.fast", "queue": "default", "meta": {}, "attempt": 1}
    ctx = JobContext(no_envelope, job_id="j2", attempt=1, summary=summary)
    outcome = execution.run(Handler("x.fast", lambda: "ok", None, None, False), [], ctx)
    assert outcome.ok and outcome.result == "ok"
    assert ctx.trace is not None  # a trace was started for the attempt all the same
