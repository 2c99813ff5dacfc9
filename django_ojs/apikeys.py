"""API keys for the OJS HTTP API: create, verify, revoke. The only writer of ``ApiKey`` rows.

A key reads ``ojs_<prefix>_<secret>``: the 12-character ``prefix`` is public and finds the
row; the 256-bit ``secret`` is stored only as a scrypt hash (OJS security §8, SEC-020) and
shown once, at creation. No HTTP or DRF code here: ``api/permissions.py`` calls
:func:`authenticate`; ``manage.py ojs_apikey`` and the admin call :func:`create`, :func:`update`
and :func:`revoke`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Sequence
from datetime import timedelta
from threading import Lock

from django.utils import timezone

from django_ojs.conf import settings
from django_ojs.drivers import get_driver
from django_ojs.models import ApiKey
from django_ojs.tenancy import validate_tenants
from django_ojs.validation import validate_queue_patterns

KEY_PREFIX = "ojs_"
PREFIX_LENGTH = 12
#: OJS security §6.1: API keys MUST carry at least 256 bits of entropy.
SECRET_BYTES = 32
#: scrypt cost (RFC 7914): about 35 ms per verification on a 2020s CPU core.
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
#: ``last_used_at`` is written at most this often per key (one UPDATE, not one per request).
LAST_USED_RESOLUTION = timedelta(minutes=1)
#: Verified keys remembered per process, so a polling worker pays scrypt once, not per fetch.
CACHE_SIZE = 1024

SCOPES = tuple(ApiKey.Scope.values)

_verified: OrderedDict[str, str] = OrderedDict()
_verified_lock = Lock()
#: Keys trusted without reading their row, by fingerprint: ``(trusted until, key)`` on
#: ``_clock``. Entries live ``OJS_API_KEY_CACHE_SECONDS``; :func:`revoke` and
#: :func:`update` empty it in their own process at once.
_trusted: dict[str, tuple[float, ApiKey]] = {}
_clock = time.monotonic


def _db(using: str | None) -> str:
    return using or settings.DATABASE


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def hash_secret(secret: str, *, salt: bytes | None = None) -> str:
    """``scrypt$N$r$p$salt$digest`` for ``secret`` (a fresh random salt by default)."""
    salt = salt if salt is not None else secrets.token_bytes(16)
    digest = hashlib.scrypt(
        secret.encode("utf-8"), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, dklen=32
    )
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${_b64(salt)}${_b64(digest)}"


def check_secret(secret: str, hashed: str) -> bool:
    """Whether ``secret`` matches ``hashed`` (constant-time comparison)."""
    try:
        algorithm, n, r, p, salt, digest = hashed.split("$")
        if algorithm != "scrypt":
            return False
        expected = _unb64(digest)
        actual = hashlib.scrypt(
            secret.encode("utf-8"),
            salt=_unb64(salt),
            n=int(n),
            r=int(r),
            p=int(p),
            dklen=len(expected),
        )
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(actual, expected)


def split_key(raw: str) -> tuple[str, str] | None:
    """``(prefix, secret)`` of a well-formed key, else ``None``."""
    if not isinstance(raw, str) or not raw.startswith(KEY_PREFIX):
        return None
    body = raw[len(KEY_PREFIX) :]
    prefix = body[:PREFIX_LENGTH]
    sep = body[PREFIX_LENGTH : PREFIX_LENGTH + 1]
    secret = body[PREFIX_LENGTH + 1 :]
    if sep != "_" or len(prefix) != PREFIX_LENGTH or not secret or len(secret) > 128:
        return None
    return prefix, secret


def _scope(scope: str) -> str:
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {', '.join(SCOPES)}")
    return scope


def create(
    name: str,
    scope: str,
    *,
    queues: Sequence[str] | None = None,
    tenants: Sequence[str] | None = None,
    using: str | None = None,
) -> tuple[ApiKey, str]:
    """Create a key; return the row and the full key string (the only time it is visible).

    ``queues`` limits the key to these queues (names or ``prefix*``); empty or ``None``:
    every queue. ``tenants`` limits it to the jobs of these tenants (multi-tenancy §5):
    it enqueues, fetches, reads and cancels only theirs; empty or ``None``: every job.
    Raises ``ValueError`` (a ``ValidationError`` for ``queues`` or ``tenants``).
    """
    if not isinstance(name, str) or not name.strip() or len(name) > 100:
        raise ValueError("name must be a non-empty string of at most 100 characters")
    scope = _scope(scope)
    allowed = validate_queue_patterns(list(queues) if queues is not None else None)
    tenant_ids = validate_tenants(list(tenants) if tenants is not None else None)
    prefix = secrets.token_hex(PREFIX_LENGTH // 2)
    secret = secrets.token_urlsafe(SECRET_BYTES)
    key = ApiKey.objects.using(_db(using)).create(
        name=name.strip(),
        prefix=prefix,
        hashed_secret=hash_secret(secret),
        scope=scope,
        queues=allowed,
        tenants=tenant_ids,
    )
    return key, f"{KEY_PREFIX}{prefix}_{secret}"


def update(
    key: ApiKey | str,
    *,
    scope: str | None = None,
    queues: Sequence[str] | None = None,
    tenants: Sequence[str] | None = None,
    using: str | None = None,
) -> ApiKey:
    """Change a key's scope, queue allowlist (``[]``: every queue) and/or tenant allowlist
    (``[]``: every tenant); effective at once.

    Raises ``ApiKey.DoesNotExist`` for an unknown prefix, ``ValueError`` for bad values.
    The secret never changes (revoke and create a key to rotate it).
    """
    using = _db(using)
    if not isinstance(key, ApiKey):
        key = ApiKey.objects.using(using).get(prefix=key)
    fields: dict[str, object] = {}
    if scope is not None:
        fields["scope"] = _scope(scope)
    if queues is not None:
        fields["queues"] = validate_queue_patterns(list(queues))
    if tenants is not None:
        fields["tenants"] = validate_tenants(list(tenants))
    if fields:
        ApiKey.objects.using(using).filter(pk=key.pk).update(**fields)
        key.refresh_from_db(using=using, fields=["scope", "queues", "tenants"])
        forget()
    return key


def authenticate(raw: str, *, using: str | None = None) -> ApiKey | None:
    """The active key ``raw`` belongs to, or ``None`` (unknown, wrong secret or revoked).

    A key verified in the last ``OJS_API_KEY_CACHE_SECONDS`` is trusted without reading its
    row: a worker polling with one key would otherwise pay a statement per request (one
    of an ACK's two). So a key revoked, or given a narrower scope or
    fewer queues, by another process keeps its old rights for at most that long; in the
    process that changes it (``revoke``, ``update``, the admin, ``manage.py ojs_apikey``)
    the change holds at once. ``0`` reads the row on every request.
    """
    fingerprint = hashlib.sha256(raw.encode("utf-8")).hexdigest() if isinstance(raw, str) else ""
    alias = _db(using)
    trusted = _trusted.get(fingerprint)
    now = _clock()
    if trusted is not None and now < trusted[0] and trusted[1]._state.db == alias:
        return trusted[1]
    parts = split_key(raw)
    if parts is None:
        return None
    prefix, secret = parts
    key = get_driver(alias).api_key(prefix)
    if key is None or not key.is_active:
        _trusted.pop(fingerprint, None)
        return None
    with _verified_lock:
        known = _verified.get(fingerprint) == key.hashed_secret
    if not known:
        if not check_secret(secret, key.hashed_secret):
            return None
        with _verified_lock:
            _verified[fingerprint] = key.hashed_secret
            while len(_verified) > CACHE_SIZE:
                _verified.popitem(last=False)
    stamp = timezone.now()
    if key.last_used_at is None or stamp - key.last_used_at > LAST_USED_RESOLUTION:
        ApiKey.objects.using(alias).filter(pk=key.pk).update(last_used_at=stamp)
        key.last_used_at = stamp
    ttl = settings.API_KEY_CACHE_SECONDS
    if ttl > 0:
        if len(_trusted) >= CACHE_SIZE:
            _trusted.clear()  # keys come from callers: never grow without bound
        _trusted[fingerprint] = (now + ttl, key)
    return key


def forget() -> None:
    """Stop trusting every remembered key in this process: the next request reads its row."""
    _trusted.clear()


def revoke(key: ApiKey | str, *, using: str | None = None) -> ApiKey:
    """Revoke a key (an ``ApiKey`` or its prefix) at once; revoking twice changes nothing.

    Raises ``ApiKey.DoesNotExist`` for an unknown prefix. Other keys are unaffected
    (OJS security §8: individual revocation).
    """
    using = _db(using)
    if not isinstance(key, ApiKey):
        key = ApiKey.objects.using(using).get(prefix=key)
    if key.revoked_at is None:
        now = timezone.now()
        ApiKey.objects.using(using).filter(pk=key.pk, revoked_at__isnull=True).update(
            revoked_at=now
        )
        key.refresh_from_db(using=using, fields=["revoked_at"])
    forget()
    return key
