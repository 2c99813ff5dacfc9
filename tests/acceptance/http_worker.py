#!/usr/bin/env python3
"""A worker that speaks only the OJS HTTP binding: standard library, no Django, no django_ojs.

It stands for a worker written in any other language (HB §10, worker protocol §4-§6)::

    python tests/acceptance/http_worker.py --url http://127.0.0.1:8000 --key ojs_... \\
        --queue default --out ran.txt [--worker-id ID] [--count 10]

Loop: ``POST /ojs/v1/workers/fetch``, run each job, append its id to ``--out`` (one per
line, flushed: the ids of the jobs it *ran*), then ``POST /ojs/v1/workers/ack``. A
background thread sends ``POST /ojs/v1/workers/heartbeat`` every ``--heartbeat-interval``
seconds, listing every job fetched and not yet acknowledged, so a long job keeps its
reservation past its visibility timeout.

Jobs: type ``poly.long`` sleeps ``args[0]["sleep_s"]`` seconds; any other type is a no-op.

Stops on SIGTERM or SIGINT (the jobs already fetched are run and acknowledged first, then
exit 0), on a ``terminate`` directive, or after ``--max-empty`` consecutive empty fetches
(0: never). Connection errors are retried with exponential backoff for up to
``--retry-for`` seconds; every non-2xx answer is logged to stderr. The last line on stdout
is a JSON summary. Exit codes: 0 stopped cleanly, 2 the server refused the worker (a 4xx
to a fetch other than 429), 3 the server stayed unreachable.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import signal
import sys
import threading
import time
import urllib.parse
import uuid
from typing import Any

API = "/ojs/v1"
CONTENT_TYPE = "application/openjobspec+json"


def log(worker_id: str, message: str) -> None:
    stamp = time.strftime("%H:%M:%S")
    sys.stderr.write(f"{stamp} [{worker_id}] {message}\n")
    sys.stderr.flush()


class Unreachable(Exception):
    """The server could not be reached for ``--retry-for`` seconds."""


class Aborted(Exception):
    """A request was given up while retrying, because the worker is stopping."""


class Client:
    """One keep-alive HTTP connection (one per thread: http.client is not thread-safe)."""

    def __init__(self, url: str, key: str, worker_id: str, *, timeout: float, retry_for: float):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise SystemExit(f"--url must be http(s)://host[:port], not {url!r}")
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port
        self.prefix = parts.path.rstrip("/")
        self.key = key
        self.worker_id = worker_id
        self.timeout = timeout
        self.retry_for = retry_for
        self.conn: http.client.HTTPConnection | None = None
        self.requests = 0
        self.non_2xx = 0
        self.connection_errors = 0
        self.connections = 0  # opened: 1 while the server keeps the connection alive

    def _connection(self) -> http.client.HTTPConnection:
        if self.conn is None:
            cls = (
                http.client.HTTPSConnection
                if self.scheme == "https"
                else http.client.HTTPConnection
            )
            self.conn = cls(self.host, self.port, timeout=self.timeout)
            self.connections += 1
        return self.conn

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def post(
        self, path: str, body: dict[str, Any], *, abort: threading.Event | None = None
    ) -> tuple[int, Any]:
        """POST ``body`` as JSON; return ``(status, decoded body)``.

        A connection error (refused, reset, closed keep-alive, timeout) is retried on a new
        connection, backing off from 0.05 s to 2 s, for up to ``retry_for`` seconds, or
        until ``abort`` is set (then :class:`Aborted`). A non-2xx answer is returned (and
        logged), not retried here.
        """
        payload = json.dumps(body).encode("utf-8")
        headers = {
            "Authorization": f"Bearer {self.key}",
            "Content-Type": CONTENT_TYPE,
            "Accept": CONTENT_TYPE,
            "OJS-Version": "1.0",
        }
        deadline = time.monotonic() + self.retry_for
        delay = 0.05
        while True:
            try:
                conn = self._connection()
                conn.request("POST", f"{self.prefix}{API}{path}", body=payload, headers=headers)
                response = conn.getresponse()
                raw = response.read()  # read it all: the connection is reused
                status = response.status
                if response.will_close:
                    self.close()
                break
            except (OSError, http.client.HTTPException) as exc:
                # OSError covers ConnectionError, socket.timeout and refused connections.
                self.close()
                self.connection_errors += 1
                if time.monotonic() + delay > deadline:
                    raise Unreachable(f"POST {path}: {exc!r} for {self.retry_for:g}s") from exc
                log(self.worker_id, f"POST {path}: {exc!r}; retrying in {delay:.2f}s")
                pause = delay * (0.5 + random.random())
                if abort is None:
                    time.sleep(pause)
                elif abort.wait(pause):
                    raise Aborted(f"POST {path}: {exc!r}") from exc
                delay = min(delay * 2, 2.0)
        self.requests += 1
        try:
            decoded = json.loads(raw) if raw else None
        except ValueError:
            decoded = raw.decode("utf-8", "replace")
        if not 200 <= status < 300:
            self.non_2xx += 1
            log(self.worker_id, f"HTTP {status} for POST {path} {body}: {str(decoded)[:500]}")
        return status, decoded


class Worker:
    def __init__(self, options: argparse.Namespace):
        self.options = options
        self.worker_id = options.worker_id or f"http-worker-{uuid.uuid4()}"
        self.client = self._client()
        self.stopping = threading.Event()  # stop fetching (signal, directive, empty queue)
        self.finished = threading.Event()  # the main loop is over: the heartbeat stops
        self.paused = threading.Event()  # a ``quiet`` directive: no fetches for now
        self.lock = threading.Lock()
        self.held: set[str] = set()  # fetched, not yet acknowledged
        self.done: set[str] = set()  # ran, acknowledgement under way
        self.long_job_beats: dict[str, int] = {}
        self.ran = 0
        self.acked = 0
        self.ack_refused = 0
        self.redelivered = 0
        self.fetches = 0
        self.heartbeats = 0
        self.reservations_lost = 0
        self.heartbeat_client: Client | None = None
        self.out = open(options.out, "a", encoding="utf-8")  # noqa: SIM115 - closed in run()

    def _client(self) -> Client:
        return Client(
            self.options.url,
            self.options.key,
            self.worker_id,
            timeout=self.options.request_timeout,
            retry_for=self.options.retry_for,
        )

    def log(self, message: str) -> None:
        log(self.worker_id, message)

    # -- signals and heartbeats ---------------------------------------------------------

    def on_signal(self, signum: int, _frame: Any) -> None:
        # Only set a flag: the jobs in hand are finished and acknowledged by the main loop.
        self.stopping.set()

    def heartbeat_loop(self) -> None:
        client = self.heartbeat_client = self._client()
        try:
            while not self.finished.wait(self.options.heartbeat_interval):
                with self.lock:
                    active = sorted(self.held)
                try:
                    status, body = client.post(
                        "/workers/heartbeat",
                        {"worker_id": self.worker_id, "active_jobs": active},
                        abort=self.finished,
                    )
                except Aborted:
                    break
                except Unreachable as exc:
                    self.log(f"heartbeat gave up: {exc}")
                    continue
                self.heartbeats += 1
                if status != 200 or not isinstance(body, dict):
                    continue
                extended = set(body.get("jobs_extended") or ())
                with self.lock:
                    for job_id in active:
                        if job_id in self.long_job_beats and job_id in extended:
                            self.long_job_beats[job_id] += 1
                    # A job acknowledged meanwhile is not extended: only the others count.
                    lost = [j for j in active if j not in extended and j not in self.done]
                    lost = [j for j in lost if j in self.held]
                self.reservations_lost += len(lost)
                for job_id in lost:
                    self.log(f"heartbeat did not extend the reservation of job {job_id}")
                for job_id in body.get("cancelled_jobs") or ():
                    self.log(f"job {job_id} was cancelled (it is run to the end anyway)")
                directive = body.get("state") or body.get("directive") or "running"
                if directive == "terminate":
                    self.log("terminate directive: stopping")
                    self.stopping.set()
                elif directive == "quiet":
                    self.paused.set()
                else:
                    self.paused.clear()
        finally:
            client.close()

    # -- the main loop --------------------------------------------------------------------

    def run(self) -> int:
        beat = threading.Thread(target=self.heartbeat_loop, name="heartbeat", daemon=True)
        beat.start()
        code = 0
        try:
            self.loop()
        except Unreachable as exc:
            self.log(f"giving up: {exc}")
            code = 3
        except Refused as exc:
            self.log(f"giving up: {exc}")
            code = 2
        finally:
            self.finished.set()
            beat.join(timeout=self.options.request_timeout + 5)
            self.client.close()
            self.out.close()
        heartbeat_errors = self.heartbeat_client.non_2xx if self.heartbeat_client else 0
        summary = {
            "worker_id": self.worker_id,
            "pid": os.getpid(),
            "exit": code,
            "fetches": self.fetches,
            "ran": self.ran,
            "acked": self.acked,
            "ack_refused": self.ack_refused,
            "redelivered": self.redelivered,
            "heartbeats": self.heartbeats,
            "reservations_lost": self.reservations_lost,
            "long_job_beats": self.long_job_beats,
            "non_2xx": self.client.non_2xx + heartbeat_errors,
            "connection_errors": self.client.connection_errors
            + (self.heartbeat_client.connection_errors if self.heartbeat_client else 0),
            "connections": self.client.connections,
        }
        print(json.dumps(summary), flush=True)
        return code

    def loop(self) -> None:
        empty = 0
        options = self.options
        while not self.stopping.is_set():
            if self.paused.is_set():
                self.stopping.wait(options.poll_interval)
                continue
            try:
                status, body = self.client.post(
                    "/workers/fetch",
                    {"queues": options.queue, "count": options.count, "worker_id": self.worker_id},
                    abort=self.stopping,
                )
            except Aborted:
                break  # stopping while the server is unreachable: nothing was fetched
            self.fetches += 1
            if status != 200:
                if status == 429 or status >= 500:
                    self.stopping.wait(max(options.poll_interval, 0.5))
                    continue
                raise Refused(f"fetch answered HTTP {status}: {body}")
            jobs = body.get("jobs") if isinstance(body, dict) else None
            if not isinstance(jobs, list):
                raise Refused(f"fetch answered without a jobs array: {body}")
            if not jobs:
                empty += 1
                if options.max_empty and empty >= options.max_empty:
                    self.log(f"{empty} empty fetches in a row: stopping")
                    break
                self.stopping.wait(options.poll_interval)
                continue
            empty = 0
            with self.lock:
                self.held.update(job["id"] for job in jobs)
            # Jobs already fetched are run and acknowledged even after SIGTERM.
            for job in jobs:
                self.handle(job)

    def handle(self, job: dict[str, Any]) -> None:
        job_id = job["id"]
        if job.get("attempt", 1) != 1:
            self.redelivered += 1
            self.log(f"job {job_id} delivered again (attempt {job.get('attempt')})")
        if job.get("type") == "poly.long":
            with self.lock:
                self.long_job_beats[job_id] = 0
            args = job.get("args") or [{}]
            seconds = float((args[0] or {}).get("sleep_s", 1.0))
            self.log(f"job {job_id} (poly.long): sleeping {seconds:g}s")
            time.sleep(seconds)
        # Any other type is a no-op.
        self.out.write(f"{job_id}\n")
        self.out.flush()
        self.ran += 1
        with self.lock:
            self.done.add(job_id)
        try:
            self.ack(job_id)
        finally:
            with self.lock:
                self.held.discard(job_id)
                self.done.discard(job_id)

    def ack(self, job_id: str) -> None:
        body = {"job_id": job_id, "worker_id": self.worker_id, "result": None}
        delay = 0.2
        for _ in range(8):
            status, _ = self.client.post("/workers/ack", body)
            if 200 <= status < 300:
                self.acked += 1
                return
            if status != 429 and status < 500:
                break  # 409: the reservation was lost; retrying cannot help
            time.sleep(delay)
            delay = min(delay * 2, 2.0)
        self.ack_refused += 1


class Refused(Exception):
    """The server refused the worker (a 4xx to a fetch): retrying cannot help."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="server base URL, e.g. http://127.0.0.1:8000")
    parser.add_argument("--key", required=True, help="API key (sent as Authorization: Bearer)")
    parser.add_argument(
        "--queue", required=True, action="append", help="queue to fetch from (repeatable)"
    )
    parser.add_argument("--out", required=True, help="file the ids of the jobs run are added to")
    parser.add_argument("--worker-id", help="default: http-worker-<uuid4>")
    parser.add_argument("--count", type=int, default=10, help="jobs per fetch (10)")
    parser.add_argument("--poll-interval", type=float, default=0.1, help="after an empty fetch")
    parser.add_argument("--heartbeat-interval", type=float, default=0.5)
    parser.add_argument("--max-empty", type=int, default=0, help="stop after N empty fetches")
    parser.add_argument("--request-timeout", type=float, default=60.0, help="per request")
    parser.add_argument("--retry-for", type=float, default=120.0, help="connection retries")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    worker = Worker(options)
    signal.signal(signal.SIGTERM, worker.on_signal)
    signal.signal(signal.SIGINT, worker.on_signal)
    return worker.run()


if __name__ == "__main__":
    sys.exit(main())
