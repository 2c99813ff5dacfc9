"""Start real ``manage.py ojs_worker`` / ``ojs_reaper`` processes against the test database.

The processes run the example project (its ``jobs.py`` has the conformance handlers)
through ``tests.acceptance.settings``, with ``DATABASE_URL`` pointing at the database
pytest-django created, and short timers passed as ``OJS_*`` environment variables.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections

from django_ojs.models import Worker

ROOT = Path(__file__).resolve().parents[2]

#: Timers short enough for tests, long enough for a loaded CI machine.
FAST_TIMERS = {
    "OJS_WORKER_HEARTBEAT_INTERVAL": 0.3,
    "OJS_WORKER_POLL_INTERVAL": 0.05,
    "OJS_REAPER_INTERVAL": 0.2,
    # Generous: a busy worker on a loaded machine (SQLite!) can be seconds late.
    "OJS_WORKER_STALE_AFTER": 15,
}


def database_url(alias: str = DEFAULT_DB_ALIAS) -> str:
    """The URL of the test database pytest-django created (for the child processes)."""
    connection = connections[alias]
    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{Path(s['NAME']).resolve()}"
    auth = s["USER"] or ""
    if s.get("PASSWORD"):
        auth += f":{s['PASSWORD']}"
    host = s.get("HOST") or "127.0.0.1"
    port = s.get("PORT") or 5432
    return f"postgres://{auth}@{host}:{port}/{s['NAME']}"


class Process:
    """A started ``manage.py`` command with its log file."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path):
        self.args = args
        self.log_path = log
        self._log = log.open("wb")
        self.popen = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), *args],
            cwd=ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.pid = self.popen.pid

    def signal(self, sig: int) -> None:
        self.popen.send_signal(sig)

    def wait(self, timeout: float) -> int:
        return self.popen.wait(timeout=timeout)

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    def output(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def worker(self) -> Worker | None:
        return Worker.objects.filter(pid=self.pid).first()

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGCONT)  # in case a test stopped it
            self.popen.kill()
            self.popen.wait(timeout=10)
        self._log.close()


@pytest.fixture
def processes(tmp_path) -> Iterator[Any]:
    """``processes.worker(*flags, **env)`` / ``processes.reaper(...)`` start commands."""
    started: list[Process] = []
    databases = {
        "DJANGO_SETTINGS_MODULE": "tests.acceptance.settings",
        "DATABASE_URL": database_url(),
    }
    jobs_alias = getattr(settings, "OJS_DATABASE", DEFAULT_DB_ALIAS)
    if jobs_alias != DEFAULT_DB_ALIAS:
        # The jobs in a database of their own (tests/twodb_settings.py): the same for the
        # processes, with each test database's URL.
        databases["DJANGO_SETTINGS_MODULE"] = "tests.acceptance.twodb_settings"
        databases["JOBS_DATABASE_URL"] = database_url(jobs_alias)

    class Starter:
        def start(self, command: list[str], env: dict[str, Any]) -> Process:
            full_env = {
                **os.environ,
                **databases,
                "OJS_LOG_LEVEL": "INFO",
                "PYTHONUNBUFFERED": "1",
            }
            for name, value in {**FAST_TIMERS, **env}.items():
                full_env[name] = json.dumps(value)
            process = Process(command, full_env, tmp_path / f"{command[0]}-{len(started)}.log")
            started.append(process)
            return process

        def worker(self, *flags: str, wait: bool = True, **env: Any) -> Process:
            process = self.start(["ojs_worker", *flags], env)
            if wait:
                # Registered means ready: a process pool's children are set up by then.
                wait_for(lambda: process.worker() is not None, process, timeout=120)
            return process

        def reaper(self, *flags: str, **env: Any) -> Process:
            return self.start(["ojs_reaper", *flags], env)

    yield Starter()
    for process in started:
        process.stop()
    for process in started:
        # Shown by pytest when a test fails: what each process logged.
        print(f"--- {' '.join(process.args)} (pid {process.pid}) ---\n{process.output()[-4000:]}")


def wait_for(
    predicate: Any,
    process: Process | Sequence[Process] | Callable[[], Sequence[Process]] | None = None,
    timeout: float = 60.0,
    *,
    tolerate: tuple[type[BaseException], ...] = (),
) -> Any:
    """Poll ``predicate`` until truthy; fail early if a watched process exited.

    ``process`` is one process, several, or a callable giving the current ones (workers
    replaced during a test). Exceptions in ``tolerate`` raised by ``predicate`` count as
    "not yet" (a database that is restarting).
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
        except tolerate:
            value = None
        if value:
            return value
        if process is None:
            watched: Sequence[Process] = ()
        elif isinstance(process, Process):
            watched = (process,)
        else:
            watched = process() if callable(process) else process
        for proc in watched:
            if proc.returncode is not None:
                raise AssertionError(
                    f"{proc.args[0]} (pid {proc.pid}) exited with {proc.returncode}:\n"
                    f"{proc.output()[-3000:]}"
                )
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(0.02)
