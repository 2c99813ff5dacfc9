"""The test settings with CORS for other origins, as docs/how-to/use-the-official-admin-ui.md
shows them (the docs include the part between the markers). Used by
``tests/integration/test_api_cors.py``; also usable as ``DJANGO_SETTINGS_MODULE``.
"""

from __future__ import annotations

from corsheaders.defaults import default_headers

from tests.settings import *  # noqa: F403 - these are the test settings plus CORS
from tests.settings import INSTALLED_APPS, MIDDLEWARE

# --8<-- [start:cors]
INSTALLED_APPS = [*INSTALLED_APPS, "corsheaders"]
# As high as possible: it answers preflight requests before any view (the OJS views
# answer OPTIONS with 405), and adds its headers to every response, errors included.
MIDDLEWARE = ["corsheaders.middleware.CorsMiddleware", *MIDDLEWARE]

# The origins whose pages may call the OJS HTTP API, with an API key (never "*").
CORS_ALLOWED_ORIGINS = ["https://ops.example.com"]
# Only the OJS HTTP API: /ojs/manifest and /ojs/v1/... (not /ojs/admin/, nor the rest
# of your site).
CORS_URLS_REGEX = r"^/ojs/(manifest|v1/.*)$"
# What OJS HTTP binding §20.2 lists: the Authorization header for the API key, and
# the OJS headers both ways.
CORS_ALLOW_HEADERS = (*default_headers, "ojs-version", "x-request-id")
CORS_EXPOSE_HEADERS = [
    "X-Request-Id",
    "OJS-Version",
    "X-RateLimit-Limit",
    "X-RateLimit-Remaining",
    "X-RateLimit-Reset",
    "Retry-After",
]
CORS_PREFLIGHT_MAX_AGE = 86400
# CORS_ALLOW_CREDENTIALS stays False (the default): other origins send an API key;
# the browser keeps the Django session cookie to your own pages.
# --8<-- [end:cors]
