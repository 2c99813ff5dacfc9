"""Request signing of webhook deliveries (OJS webhooks §8.1-§8.3). Pure.

``X-OJS-Signature: sha256=<hex HMAC-SHA256(secret, "<timestamp>.<body>")>``, with one
signature per valid secret, comma-separated, while a rotated-out secret is in its grace
period (§8.3). :func:`verify` is what a receiver runs (§8.2).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets as random_secrets
import time
from collections.abc import Iterable

PREFIX = "sha256="
#: Webhooks §8.1: a receiver SHOULD refuse timestamps further than this from its clock.
DEFAULT_TOLERANCE = 300
SECRET_PREFIX = "whsec_"  # noqa: S105 - the prefix of made secrets, not a secret

CONTENT_TYPE = "Content-Type"
USER_AGENT = "User-Agent"
EVENT_TYPE = "X-OJS-Event-Type"
DELIVERY_ID = "X-OJS-Delivery-ID"
SUBSCRIPTION_ID = "X-OJS-Subscription-ID"
SIGNATURE = "X-OJS-Signature"
TIMESTAMP = "X-OJS-Timestamp"


def new_secret() -> str:
    """A fresh signing secret (``whsec_`` and 256 random bits)."""
    return SECRET_PREFIX + random_secrets.token_urlsafe(32)


def sign(secret: str, timestamp: int | str, body: bytes) -> str:
    """``sha256=<hex>``: HMAC-SHA256 of ``"<timestamp>.<body>"`` keyed with ``secret``."""
    message = str(timestamp).encode() + b"." + body
    return PREFIX + hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def signature_header(secrets: Iterable[str], timestamp: int | str, body: bytes) -> str:
    """The ``X-OJS-Signature`` value: one signature per secret, newest first, by commas."""
    return ",".join(sign(secret, timestamp, body) for secret in secrets)


def verify(
    secret: str,
    timestamp: str,
    body: bytes,
    header: str,
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    now: float | None = None,
) -> bool:
    """Whether a delivery is authentic and fresh (webhooks §8.2).

    ``header`` is the ``X-OJS-Signature`` value (one or more ``sha256=…`` by commas);
    ``timestamp`` is ``X-OJS-Timestamp``; ``body`` the raw request body.
    """
    try:
        sent = int(timestamp)
    except (TypeError, ValueError):
        return False
    current = time.time() if now is None else now
    if abs(current - sent) > tolerance:
        return False
    expected = sign(secret, timestamp, body)
    return any(
        hmac.compare_digest(expected.encode(), part.strip().encode()) for part in header.split(",")
    )


def headers(
    *,
    event_type: str,
    delivery_id: str,
    subscription_id: str,
    timestamp: int,
    signature: str,
    user_agent: str,
) -> dict[str, str]:
    """The headers of one delivery (webhooks §5.3, all of the required ones)."""
    return {
        CONTENT_TYPE: "application/json",
        USER_AGENT: user_agent,
        EVENT_TYPE: event_type,
        DELIVERY_ID: delivery_id,
        SUBSCRIPTION_ID: subscription_id,
        SIGNATURE: signature,
        TIMESTAMP: str(timestamp),
    }
