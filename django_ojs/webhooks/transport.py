"""One HTTP POST to a webhook endpoint, with the standard library's ``http.client``.

Connects to an address :func:`~django_ojs.webhooks.addresses.checked` approved (the TLS
certificate is still verified for the URL's host name), never follows a redirect (a 3xx
is returned as it is), times out (``timeout`` for the connection and each read, and a
deadline over reading the body) and reads at most ``max_bytes`` of the body. No
database access.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import time
from dataclasses import dataclass
from typing import Any

from django_ojs.webhooks import addresses

CHUNK = 8192


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    elapsed_ms: int
    retry_after: str | None = None


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """An HTTP connection to a given address, whatever its host name resolves to now."""

    def __init__(self, host: str, port: int, *, address: str, timeout: float):
        super().__init__(host, port, timeout=timeout)
        self.address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self.address, self.port), self.timeout)


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """The TLS twin of :class:`_PinnedHTTPConnection` (SNI and certificate: the host)."""

    def __init__(self, host: str, port: int, *, address: str, timeout: float):
        self.tls = ssl.create_default_context()
        super().__init__(host, port, timeout=timeout, context=self.tls)
        self.address = address

    def connect(self) -> None:
        sock = socket.create_connection((self.address, self.port), self.timeout)
        self.sock = self.tls.wrap_socket(sock, server_hostname=self.host)


def post(
    url: str,
    body: bytes,
    headers: dict[str, str],
    *,
    timeout: float,
    max_bytes: int,
    allow_private: bool,
    allow_http: bool,
) -> Response:
    """POST ``body`` to ``url``. Raises :class:`~django_ojs.webhooks.addresses.AddressRefused`,
    ``ValidationError`` (a URL no longer allowed), ``OSError``/``http.client.HTTPException``
    (connection, TLS, timeout)."""
    parts = addresses.parse_url(url, allow_http=allow_http)
    host = parts.hostname or ""
    port = addresses.default_port(parts)
    targets = addresses.checked(host, port, allow_private=allow_private)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    kind = _PinnedHTTPSConnection if parts.scheme == "https" else _PinnedHTTPConnection
    started = time.monotonic()
    deadline = started + timeout * 2
    last_error: OSError | None = None
    for target in targets:
        conn = kind(host, port, address=str(target), timeout=timeout)
        try:
            try:
                conn.connect()
            except OSError as exc:
                last_error = exc  # the next address (IPv4/IPv6), if any
                continue
            conn.request("POST", path, body=body, headers=headers)
            response = conn.getresponse()
            data = _read(response, max_bytes, deadline)
            return Response(
                status=response.status,
                body=data,
                elapsed_ms=int((time.monotonic() - started) * 1000),
                retry_after=response.getheader("Retry-After"),
            )
        finally:
            conn.close()
    assert last_error is not None
    raise last_error


def _read(response: Any, max_bytes: int, deadline: float) -> bytes:
    """At most ``max_bytes`` of the body; a body dripping past ``deadline`` times out."""
    chunks: list[bytes] = []
    size = 0
    while size < max_bytes:
        if time.monotonic() > deadline:
            raise TimeoutError("the endpoint's response took too long")
        chunk = response.read(min(CHUNK, max_bytes - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)
