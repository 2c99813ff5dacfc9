"""Request rate limiting of the HTTP API (rate-limiting §10.4), off unless configured.

``OJS_API_RATE_LIMIT = "1000/min"`` allows each caller (an API key, a staff user, or an
address when the API is open) that many requests per window (``s``, ``min``, ``h``,
``day``). Every response then carries ``X-RateLimit-Limit``, ``X-RateLimit-Remaining`` and
``X-RateLimit-Reset`` (Unix seconds), and a request over the limit gets ``429
rate_limited`` with ``Retry-After``. Counters live in Django's cache (DRF's
``SimpleRateThrottle``, a sliding window): use a shared cache (Redis, Memcached, the
database cache) when the API runs in several processes.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

from rest_framework.throttling import SimpleRateThrottle

from django_ojs.api import permissions
from django_ojs.conf import settings


class CallerRateThrottle(SimpleRateThrottle):
    scope = "ojs"

    def get_rate(self) -> str | None:
        return settings.API_RATE_LIMIT

    def get_cache_key(self, request: Any, view: Any) -> str:
        caller = permissions.principal(request)
        ident = caller.name if caller is not None and caller.role else self.get_ident(request)
        # Hashed: names may hold characters some cache backends refuse in keys.
        return "ojs-throttle:" + hashlib.sha256(str(ident).encode()).hexdigest()[:32]

    def allow_request(self, request: Any, view: Any) -> bool:
        allowed = super().allow_request(request, view)
        if self.rate is not None:
            # Set by SimpleRateThrottle from the rate; the stubs do not declare them.
            limit: int = getattr(self, "num_requests", 0)
            duration: int = getattr(self, "duration", 0)
            oldest = self.history[-1] if self.history else self.now
            request.ojs_rate_limit = {
                "X-RateLimit-Limit": str(limit),
                "X-RateLimit-Remaining": str(max(limit - len(self.history), 0)),
                "X-RateLimit-Reset": str(math.ceil(oldest + duration)),
            }
        return bool(allowed)
