"""A real HTTP endpoint for webhook tests, and one delivery run as the worker runs it.

:class:`Receiver` is an ``http.server`` on 127.0.0.1 in a thread: it records each request
and answers with the status, headers and body a test sets. The socket is listening before
the fixture returns, so there is nothing to wait for.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.utils import timezone

from django_ojs import lifecycle
from django_ojs.conf import settings
from django_ojs.context import JobContext
from django_ojs.models import Job
from django_ojs.registry import registry
from django_ojs.worker import execution


@dataclass
class Request:
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    url: str = ""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b"OK"
    requests: list[Request] = field(default_factory=list)
    #: While cleared, requests wait (a slow endpoint); set at teardown.
    answer: threading.Event = field(default_factory=threading.Event)


@pytest.fixture
def open_network(settings: Any) -> None:
    """Deliveries to 127.0.0.1 over plain HTTP (development settings)."""
    settings.OJS_WEBHOOKS_ALLOW_PRIVATE = True
    settings.OJS_WEBHOOKS_ALLOW_HTTP = True


@contextlib.contextmanager
def serving(tls: ssl.SSLContext | None = None) -> Iterator[Receiver]:
    """A :class:`Receiver` listening on 127.0.0.1 (HTTPS with ``tls``) until the end."""
    rec = Receiver()
    rec.answer.set()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            headers = {k.lower(): v for k, v in self.headers.items()}
            rec.requests.append(Request(self.path, headers, body))
            rec.answer.wait(60)
            self.send_response(rec.status)
            for name, value in rec.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(rec.body)))
            self.end_headers()
            self.wfile.write(rec.body)

        def log_message(self, *args: Any) -> None:
            pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request: Any, client_address: Any) -> None:
            pass  # a client that refuses our certificate, say: the test looks at the client

    server = Server(("127.0.0.1", 0), Handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    scheme = "https" if tls is not None else "http"
    host = "localhost" if tls is not None else "127.0.0.1"
    rec.url = f"{scheme}://{host}:{server.server_port}/hooks/ojs"
    try:
        yield rec
    finally:
        rec.answer.set()
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with serving() as rec:
        yield rec


def deliveries(**filters: Any) -> list[Job]:
    return list(
        Job.objects.filter(type="ojs.webhook.deliver", **filters).order_by("created_at", "id")
    )


def run_delivery() -> Job | None:
    """Fetch one delivery job and run it as ``ojs_worker`` does: the registered handler,
    then ACK with its result or FAIL with the error an exception makes."""
    jobs = lifecycle.fetch([settings.WEBHOOKS_QUEUE], 1)
    if not jobs:
        return None
    job = jobs[0]
    handler = registry.get(job.type)
    assert handler is not None
    ctx = JobContext({}, job_id=str(job.id), attempt=job.attempt)
    args, kwargs = handler.call_args(list(job.args), ctx)
    try:
        result = handler.func(*args, **kwargs)
    except Exception as exc:
        return lifecycle.fail(job.id, execution.exception_error(exc))
    return lifecycle.ack(job.id, result)


def make_due() -> None:
    """Bring the retries of every delivery forward to now (as if their backoff had passed)."""
    Job.objects.filter(type="ojs.webhook.deliver", state="retryable").update(
        next_attempt_at=timezone.now() - timedelta(seconds=1)
    )


def complete_a_job(type: str = "test.echo", queue: str = "default") -> Job:
    """Enqueue, fetch and ACK a job: its ``job.enqueued``, ``job.started`` and
    ``job.completed`` events are stored."""
    job = lifecycle.enqueue(type, ["x"], queue=queue)
    fetched = lifecycle.fetch([queue], 1)
    assert [j.id for j in fetched] == [job.id]
    return lifecycle.ack(job.id, {"ok": True})
