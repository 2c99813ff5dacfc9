"""The Python API and the HTTP binding refuse the same input with the same message and field.

Each case sends one bad input both ways: through ``lifecycle``/``django_ojs`` (a
``ValidationError``) and over HTTP (a 400 ``invalid_payload`` envelope naming
``details.field``). Both go through the rule in ``django_ojs.validation``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.test import override_settings

import django_ojs
from django_ojs import lifecycle
from django_ojs.exceptions import EnvelopeTooLarge, JobTypeNotAllowed, ValidationError
from django_ojs.models import Job
from tests.integration.api_support import assert_ojs_error, client

pytestmark = pytest.mark.django_db

JOB = "0190d5d0-0000-7000-8000-000000000000"  # validation happens before any lookup
META_KEY_RULE = "meta keys must match [a-zA-Z0-9_.-] and be 1 to 128 characters; {key} does not"
QUEUE_RULE = "must match [a-z0-9][a-z0-9-.]* and be at most 128 characters"


@dataclass
class Case:
    python: Callable[[], Any]
    method: str
    path: str
    body: Any
    field: str
    message: str


CASES = {
    # FETCH
    "fetch queue name": Case(
        lambda: lifecycle.fetch(["Bad Q"]),
        "POST", "/workers/fetch", {"queues": ["Bad Q"]},
        "queues", f"queues[0] {QUEUE_RULE}",
    ),
    "fetch queue name with a trailing newline": Case(
        lambda: lifecycle.fetch(["default", "mail\n"]),
        "POST", "/workers/fetch", {"queues": ["default", "mail\n"]},
        "queues", f"queues[1] {QUEUE_RULE}",
    ),
    "fetch empty queue name": Case(
        lambda: lifecycle.fetch([""]),
        "POST", "/workers/fetch", {"queues": [""]},
        "queues", "queues[0] must be a non-empty string",
    ),
    "fetch no queues": Case(
        lambda: lifecycle.fetch([]),
        "POST", "/workers/fetch", {"queues": []},
        "queues", "queues must name at least one queue",
    ),
    "fetch queues as a string": Case(
        lambda: lifecycle.fetch("default"),
        "POST", "/workers/fetch", {"queues": "default"},
        "queues", "queues must be an array of queue names",
    ),
    "fetch count zero": Case(
        lambda: lifecycle.fetch(["default"], 0),
        "POST", "/workers/fetch", {"queues": ["default"], "count": 0},
        "count", "count must be an integer from 1 to 1000",
    ),
    "fetch count too large": Case(
        lambda: lifecycle.fetch(["default"], 1001),
        "POST", "/workers/fetch", {"queues": ["default"], "count": 1001},
        "count", "count must be an integer from 1 to 1000",
    ),
    "fetch count boolean": Case(
        lambda: lifecycle.fetch(["default"], True),
        "POST", "/workers/fetch", {"queues": ["default"], "count": True},
        "count", "count must be an integer from 1 to 1000",
    ),
    "fetch empty worker id": Case(
        lambda: lifecycle.fetch(["default"], worker_id=""),
        "POST", "/workers/fetch", {"queues": ["default"], "worker_id": ""},
        "worker_id", "worker_id must be a non-empty string",
    ),
    "fetch long worker id": Case(
        lambda: lifecycle.fetch(["default"], worker_id="w" * 256),
        "POST", "/workers/fetch", {"queues": ["default"], "worker_id": "w" * 256},
        "worker_id", "worker_id must be at most 255 characters",
    ),
    "fetch negative visibility timeout": Case(
        lambda: lifecycle.fetch(["default"], visibility_timeout=-1),
        "POST", "/workers/fetch", {"queues": ["default"], "visibility_timeout": -1},
        "visibility_timeout", "visibility_timeout must be a positive number of seconds",
    ),
    "fetch zero ISO-8601 visibility timeout": Case(
        lambda: lifecycle.fetch(["default"], visibility_timeout="PT0S"),
        "POST", "/workers/fetch", {"queues": ["default"], "visibility_timeout": "PT0S"},
        "visibility_timeout", "visibility_timeout must be a positive number of seconds",
    ),
    # BEAT
    "beat without worker id": Case(
        lambda: lifecycle.beat(None),
        "POST", "/workers/heartbeat", {},
        "worker_id", "worker_id is required",
    ),
    "beat worker id not a string": Case(
        lambda: lifecycle.beat(5),
        "POST", "/workers/heartbeat", {"worker_id": 5},
        "worker_id", "worker_id must be a non-empty string",
    ),
    "beat unknown state": Case(
        lambda: lifecycle.beat("w1", state="sleeping"),
        "POST", "/workers/heartbeat", {"worker_id": "w1", "state": "sleeping"},
        "state", "state must be running, quiet or terminate",
    ),
    "beat state with a trailing newline": Case(
        lambda: lifecycle.beat("w1", state="quiet\n"),
        "POST", "/workers/heartbeat", {"worker_id": "w1", "state": "quiet\n"},
        "state", "state must be running, quiet or terminate",
    ),
    "beat negative pid": Case(
        lambda: lifecycle.beat("w1", pid=-1),
        "POST", "/workers/heartbeat", {"worker_id": "w1", "pid": -1},
        "pid", "pid must be an integer from 0 to 2147483647",
    ),
    "beat bad queue": Case(
        lambda: lifecycle.beat("w1", queues=["Mail"]),
        "POST", "/workers/heartbeat", {"worker_id": "w1", "queues": ["Mail"]},
        "queues", f"queues[0] {QUEUE_RULE}",
    ),
    "beat zero visibility timeout": Case(
        lambda: lifecycle.beat("w1", visibility_timeout=0),
        "POST", "/workers/heartbeat", {"worker_id": "w1", "visibility_timeout": 0},
        "visibility_timeout", "visibility_timeout must be a positive number of seconds",
    ),
    # progress
    "progress not a number": Case(
        lambda: lifecycle.report_progress(JOB, "half"),
        "PUT", f"/jobs/{JOB}/progress", {"progress": "half"},
        "progress", "progress must be a number from 0 to 1",
    ),
    "progress message not a string": Case(
        lambda: lifecycle.report_progress(JOB, 0.5, message=3),
        "PUT", f"/jobs/{JOB}/progress", {"progress": 0.5, "message": 3},
        "message", "message must be a string",
    ),
    "progress data not an object": Case(
        lambda: lifecycle.report_progress(JOB, 0.5, data=[1]),
        "PUT", f"/jobs/{JOB}/progress", {"progress": 0.5, "data": [1]},
        "data", "data must be an object",
    ),
    "progress empty worker id": Case(
        lambda: lifecycle.report_progress(JOB, 0.5, worker_id=""),
        "PUT", f"/jobs/{JOB}/progress", {"progress": 0.5, "worker_id": ""},
        "worker_id", "worker_id must be a non-empty string",
    ),
    # ACK / FAIL
    "ack empty worker id": Case(
        lambda: lifecycle.ack(JOB, worker_id=""),
        "POST", "/workers/ack", {"job_id": JOB, "worker_id": ""},
        "worker_id", "worker_id must be a non-empty string",
    ),
    "fail worker id not a string": Case(
        lambda: lifecycle.fail(JOB, "boom", worker_id=7),
        "POST", "/workers/nack", {"job_id": JOB, "error": "boom", "worker_id": 7},
        "worker_id", "worker_id must be a non-empty string",
    ),
    # enqueue
    "enqueue queue name": Case(
        lambda: django_ojs.enqueue("a.b", queue="Mail"),
        "POST", "/jobs", {"type": "a.b", "args": [], "options": {"queue": "Mail"}},
        "queue", f"queue {QUEUE_RULE}",
    ),
    "enqueue queue name with a trailing newline": Case(
        lambda: django_ojs.enqueue("a.b", queue="mail\n"),
        "POST", "/jobs", {"type": "a.b", "args": [], "options": {"queue": "mail\n"}},
        "queue", f"queue {QUEUE_RULE}",
    ),
    "enqueue type with a trailing newline": Case(
        lambda: django_ojs.enqueue("a.b\n"),
        "POST", "/jobs", {"type": "a.b\n", "args": []},
        "type",
        "type must be dot-separated lower-case segments of letters, digits, '_' or '-', "
        "each starting with a letter (e.g. 'email.send')",
    ),
    "enqueue zero timeout": Case(
        lambda: django_ojs.enqueue("a.b", timeout=0),
        "POST", "/jobs", {"type": "a.b", "args": [], "options": {"timeout": 0}},
        "timeout", "timeout must be a positive number of seconds",
    ),
    "enqueue ISO-8601 timeout": Case(
        lambda: django_ojs.enqueue("a.b", timeout="soon"),
        "POST", "/jobs", {"type": "a.b", "args": [], "options": {"timeout": "soon"}},
        "timeout", "timeout 'soon' is not an ISO-8601 duration (e.g. 'PT1S', 'PT5M')",
    ),
    # meta (OJS security §8.3)
    "enqueue meta key with a space": Case(
        lambda: django_ojs.enqueue("a.b", meta={"bad key": 1}),
        "POST", "/jobs", {"type": "a.b", "args": [], "meta": {"bad key": 1}},
        "meta", META_KEY_RULE.format(key="'bad key'"),
    ),
    "enqueue meta key too long": Case(
        lambda: django_ojs.enqueue("a.b", meta={"k" * 129: 1}),
        "POST", "/jobs", {"type": "a.b", "args": [], "meta": {"k" * 129: 1}},
        "meta", META_KEY_RULE.format(key=repr("k" * 129)),
    ),
    "enqueue meta value with a newline": Case(
        lambda: django_ojs.enqueue("a.b", meta={"note": "a\r\nSet-Cookie: x"}),
        "POST", "/jobs", {"type": "a.b", "args": [], "meta": {"note": "a\r\nSet-Cookie: x"}},
        "meta.note", "meta.note must not contain newline characters (\\r or \\n)",
    ),
    "enqueue nested meta value with a newline": Case(
        lambda: django_ojs.enqueue("a.b", meta={"tags": ["ok", "x\n"]}),
        "POST", "/jobs", {"type": "a.b", "args": [], "options": {"metadata": {"tags": ["ok", "x\n"]}}},
        "meta.tags", "meta.tags must not contain newline characters (\\r or \\n)",
    ),
    "retry override meta key": Case(
        lambda: lifecycle.retry_discarded(JOB, override={"meta": {"a/b": 1}}),
        "POST", f"/dead-letter/{JOB}/retry", {"override": {"meta": {"a/b": 1}}},
        "meta", META_KEY_RULE.format(key="'a/b'"),
    ),
    # queues
    "pause queue name": Case(
        lambda: lifecycle.pause_queue("Mail"),
        "POST", "/queues/Mail/pause", {},
        "queue", f"queue {QUEUE_RULE}",
    ),
    "resume queue name": Case(
        lambda: lifecycle.resume_queue("m" * 129),
        "POST", f"/queues/{'m' * 129}/resume", {},
        "queue", f"queue {QUEUE_RULE}",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_python_and_http_refuse_alike(case: Case):
    with pytest.raises(ValidationError) as info:
        case.python()
    python = (info.value.field, info.value.message)

    response = client("admin").request(case.method, case.path, case.body)
    error = assert_ojs_error(response, 400, "invalid_payload")
    http = (error["details"].get("field"), error["message"])

    assert python == http == (case.field, case.message)


def test_meta_over_64_kib__413_both_ways_with_the_same_message():
    meta = {"blob": "x" * (64 * 1024)}
    with pytest.raises(EnvelopeTooLarge) as info:
        django_ojs.enqueue("a.b", meta=meta)
    response = client("admin").post("/jobs", {"type": "a.b", "args": [], "meta": meta})
    error = assert_ojs_error(response, 413, "envelope_too_large")
    assert error["message"] == info.value.message
    assert error["details"]["field"] == "meta" and error["details"]["limit"] == 65536


def test_meta_at_the_limits__is_accepted():
    meta = {"k" * 128: "v", "a.b-c_D9": ["no", "newline"], "blob": "x" * 60_000}
    job = django_ojs.enqueue("a.b", meta=meta)
    assert job.meta == meta
    response = client("admin").post("/jobs", {"type": "a.b", "args": [], "meta": meta})
    assert response.status_code == 201, response.body


@override_settings(OJS_ALLOWED_JOB_TYPES=["email.send", "billing.*"])
def test_job_type_allowlist__422_over_http_and_a_typed_error_in_python():
    with pytest.raises(JobTypeNotAllowed) as info:
        django_ojs.enqueue("report.build")
    api = client("admin")
    error = assert_ojs_error(
        api.post("/jobs", {"type": "report.build", "args": []}), 422, "invalid_payload"
    )
    assert error["message"] == info.value.message
    assert error["details"]["field"] == "type"
    assert error["details"]["allowed"] == ["email.send", "billing.*"]
    # Allowed: an exact type and anything under a prefix.* pattern.
    assert django_ojs.enqueue("email.send").type == "email.send"
    assert api.post("/jobs", {"type": "billing.invoice.send", "args": []}).status_code == 201
    assert api.post("/jobs", {"type": "billing", "args": []}).status_code == 422
    # A batch is all or none, and names the refused item.
    batch = {"jobs": [{"type": "email.send", "args": []}, {"type": "x.y", "args": []}]}
    error = assert_ojs_error(api.post("/jobs/batch", batch), 422, "invalid_payload")
    assert error["details"]["index"] == 1
    with pytest.raises(JobTypeNotAllowed):
        django_ojs.enqueue_many([{"type": "email.send"}, {"type": "x.y"}])
    assert not Job.objects.filter(type="x.y").exists()


def test_job_type_allowlist__is_off_by_default():
    assert django_ojs.enqueue("any.type.at_all").type == "any.type.at_all"
