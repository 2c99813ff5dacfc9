"""Private PostgreSQL clusters for the opt-in acceptance tests: ``initdb`` + ``pg_ctl``.

Used by the restart test (one cluster, stopped and started) and the failover test (a
primary and a streaming standby made with ``pg_basebackup -R``, the primary stopped hard
and the standby promoted). Each cluster lives in a directory under /tmp on a port of its
own; nothing touches the suite's shared server. Run as root, the server tools run as the
``postgres`` user.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.acceptance.conftest import FAST_TIMERS, ROOT, wait_for


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_binaries() -> Path:
    binaries = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    found = shutil.which("pg_ctl") or (binaries[-1] if binaries else None)
    if found is None:
        pytest.skip("no PostgreSQL server binaries (pg_ctl) found")
    return Path(found).resolve().parent  # /usr/local/bin/pg_ctl may be a lone link


class ToolFailed(AssertionError):
    """A server tool (``pg_ctl``, ``initdb``...) failed; the message has its output."""


class Cluster:
    """A private PostgreSQL cluster in ``root/data`` on ``port`` (a free one by default)."""

    def __init__(self, root: Path, dbname: str, port: int | None = None):
        self.bin = server_binaries()
        self.root = root
        self.data = root / "data"
        self.dbname = dbname
        self.port = port or free_port()
        self.as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/{dbname}"
        if self.as_user:
            root.mkdir(parents=True, exist_ok=True)
            shutil.chown(root, "postgres")

    def run(self, tool: str, *args: str) -> None:
        done = subprocess.run(
            [*self.as_user, str(self.bin / tool), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=120,
        )
        if done.returncode:
            output = done.stdout.decode(errors="replace")[-2000:]
            raise ToolFailed(f"{tool} {' '.join(args)} exited with {done.returncode}:\n{output}")

    def init(self) -> None:
        self.run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync")

    def base_backup(self, primary: Cluster) -> None:
        """Make this cluster a streaming standby of ``primary`` (``-R`` writes
        ``standby.signal`` and ``primary_conninfo``)."""
        self.run(
            "pg_basebackup", "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres",
            "-D", str(self.data), "-R", "-X", "stream", "--no-sync", "--checkpoint=fast",
        )  # fmt: skip

    def configure(self, **parameters: Any) -> None:
        """Append ``name = value`` lines to ``postgresql.auto.conf``, where they override
        what ``postgresql.conf`` and ``pg_basebackup -R`` set (read at the next start)."""
        lines = "".join(f"{name} = '{value}'\n" for name, value in parameters.items())
        with (self.data / "postgresql.auto.conf").open("a") as conf:
            conf.write(lines)

    def start(self, port: int | None = None) -> None:
        """Start the server on its port (or on ``port``, which it keeps from then on)."""
        self.port = port or self.port
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        log = str(self.root / "server.log")
        self.run("pg_ctl", "-D", str(self.data), "-o", options, "-l", log, "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        self.run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def promote(self) -> None:
        self.run("pg_ctl", "-D", str(self.data), "-w", "promote")

    def connect(self, dbname: str | None = None) -> psycopg.Connection[Any]:
        return psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname=dbname or self.dbname,
            autocommit=True, connect_timeout=5,
        )  # fmt: skip

    def query(self, sql: str, params: Any = None, dbname: str | None = None) -> Any:
        """The first row of ``sql`` (None for a statement that returns none)."""
        with self.connect(dbname) as conn:
            cursor = conn.execute(sql, params)
            return cursor.fetchone() if cursor.description else None

    def rows(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        with self.connect() as conn:
            return conn.execute(sql, params).fetchall()

    def log(self) -> str:
        path = self.root / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""


@dataclass
class Pair:
    """A primary and its streaming standby; the standby streams through ``relay``."""

    primary: Cluster
    standby: Cluster
    relay: Relay
    synchronous: bool

    @property
    def url(self) -> str:
        """The libpq multi-host URL: whichever of the two accepts writes."""
        return (
            f"postgres://postgres@127.0.0.1:{self.primary.port},127.0.0.1:{self.standby.port}"
            f"/{self.primary.dbname}?target_session_attrs=read-write&connect_timeout=5"
        )


@contextlib.contextmanager
def streaming_pair(prefix: str, dbname: str, *, synchronous: bool) -> Iterator[Pair]:
    """A migrated primary and a standby streaming from it (``pg_basebackup -R``),
    asynchronous or synchronous (``synchronous_standby_names = '*'``); both stopped and
    removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    if os.geteuid() == 0:
        os.chmod(root, 0o755)
    primary = Cluster(root / "primary", dbname)
    standby = Cluster(root / "standby", dbname)
    relay: Relay | None = None
    try:
        primary.init()
        primary.start()
        primary.query(f"CREATE DATABASE {dbname}", dbname="postgres")
        migrate(primary.url)
        standby.base_backup(primary)
        relay = Relay(primary.port)
        standby.configure(primary_conninfo=f"host=127.0.0.1 port={relay.port} user=postgres")
        standby.start()
        if synchronous:
            primary.query("ALTER SYSTEM SET synchronous_standby_names = '*'")
            primary.query("SELECT pg_reload_conf()")
        streaming = (
            "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' AND sync_state = %s"
        )
        state = "sync" if synchronous else "async"
        wait_for(lambda: primary.query(streaming, [state])[0] == 1, timeout=60)
        yield Pair(primary, standby, relay, synchronous)
    finally:
        if relay is not None:
            relay.cut()
        for cluster in (primary, standby):
            with contextlib.suppress(ToolFailed):  # already stopped
                cluster.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


def environment(url: str, settings: str = "tests.acceptance.settings", **timers: Any) -> dict:
    """The environment of a ``manage.py`` process on ``url``, with the fast timers."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": settings,
        "DATABASE_URL": url,
        "OJS_LOG_LEVEL": "INFO",
        "PYTHONUNBUFFERED": "1",
    }
    env.update({name: json.dumps(value) for name, value in {**FAST_TIMERS, **timers}.items()})
    return env


def migrate(url: str) -> None:
    subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "migrate", "--noinput", "-v", "0"],
        cwd=ROOT,
        env=environment(url),
        check=True,
        timeout=300,
    )


class Relay:
    """A TCP relay on a free port to ``127.0.0.1:target``: the standby streams from the
    primary through it, so the test can hold back what reaches the standby (a lagging
    standby) and then cut the link, discarding what was held."""

    def __init__(self, target: int):
        self.target = target
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.server.getsockname()[1])
        self.held = threading.Event()
        self.cut_off = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def hold(self) -> None:
        """Stop passing data from the primary on (it waits, unsent)."""
        self.held.set()

    def release(self) -> None:
        """Pass on what was held, and all that follows."""
        self.held.clear()

    def cut(self) -> None:
        """Close every connection and stop accepting: what was held is lost."""
        self.cut_off.set()
        with contextlib.suppress(OSError):
            self.server.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self.server.close()
        with self._lock:
            for sock in self._sockets:
                # shutdown() first: it wakes a thread blocked in recv() and sends the FIN at
                # once (close() alone waits for that thread).
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    sock.close()

    def _accept(self) -> None:
        while not self.cut_off.is_set():
            try:
                client, _ = self.server.accept()
                upstream = socket.create_connection(("127.0.0.1", self.target), timeout=5)
            except OSError:
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets += [client, upstream]
            for src, dst, from_primary in ((upstream, client, True), (client, upstream, False)):
                args = (src, dst, from_primary)
                threading.Thread(target=self._pipe, args=args, daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, from_primary: bool) -> None:
        try:
            while not self.cut_off.is_set():
                while from_primary and self.held.is_set() and not self.cut_off.is_set():
                    time.sleep(0.01)
                data = src.recv(65536)
                if not data or self.cut_off.is_set():
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.close()
