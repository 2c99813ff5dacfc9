"""Serve a built copy of the official OJS admin UI at ``/ojs/admin/``, behind staff login.

The operator names the built UI's directory in ``OJS_ADMIN_UI_DIR`` (``dist-app/`` of
openjobspec/ojs-admin-ui). Files under it are sent as they are; every other path is a deep
link of the single-page app and gets ``index.html``, with a ``<base href>`` and the CSRF
shim (``static/ojs/admin-ui-csrf.js``) put in its ``<head>``. This module only reads files:
it never runs, evaluates or unpickles what it serves, and never writes anything.
"""

from __future__ import annotations

import html
import mimetypes
import posixpath
from email.utils import formatdate
from pathlib import Path
from typing import Any

from django.conf import settings as django_settings
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import FileResponse, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.http.response import HttpResponseBase
from django.middleware.csrf import get_token
from django.urls import NoReverseMatch, reverse
from django.utils.cache import get_conditional_response
from django.utils.encoding import iri_to_uri
from rest_framework.response import Response

from django_ojs.api.views.base import OJSView
from django_ojs.conf import settings
from django_ojs.exceptions import NotFound

#: The shim's path under the UI's root; the official UI has no file there.
SHIM_PATH = "_django_ojs/csrf.js"
SHIM_FILE = Path(__file__).resolve().parents[2] / "static" / "ojs" / "admin-ui-csrf.js"
#: Bytes of ``index.html`` read at most (the official one is about 600).
MAX_INDEX_BYTES = 1024 * 1024


class AdminUIUnavailableView(OJSView):
    """The OJS 404 envelope when the UI is not configured (or not built)."""

    message = ""
    hint = ""

    def _unavailable(self, request: Any, *args: Any, **kwargs: Any) -> Response:
        raise NotFound(self.message, details={"path": request.path, "hint": self.hint})

    get = post = put = patch = delete = head = options = _unavailable


def _unavailable(request: HttpRequest, message: str, hint: str) -> HttpResponseBase:
    view = AdminUIUnavailableView.as_view(message=message, hint=hint)
    response: HttpResponseBase = view(request)
    return response


def admin_ui(request: HttpRequest, path: str = "") -> HttpResponseBase:
    """``/ojs/admin/<path>``: a file of the built UI, or its ``index.html`` for a deep link."""
    root = settings.ADMIN_UI_DIR
    if root is None:
        return _unavailable(
            request,
            "The OJS admin UI is not enabled on this server.",
            "Build openjobspec/ojs-admin-ui (npx vite build writes dist-app/) and set "
            "OJS_ADMIN_UI_DIR to that directory; see the how-to 'Use the official admin UI'.",
        )
    user = request.user
    if not user.is_authenticated:
        return redirect_to_login(request.get_full_path(), _login_url())
    if not (user.is_active and user.is_staff):
        raise PermissionDenied("The OJS admin UI is for staff users.")
    if request.method not in ("GET", "HEAD"):
        return HttpResponseNotAllowed(["GET", "HEAD"])
    if path == SHIM_PATH:
        return _file(request, SHIM_FILE, "no-cache")
    relative = _relative(path)
    if relative is None:
        return _not_found(request)
    root = root.resolve()
    if relative and relative != "index.html":  # the page itself always gets its additions
        candidate = (root / relative).resolve()
        # resolve() follows symbolic links: one leading out of the directory is refused.
        if not candidate.is_relative_to(root):
            return _not_found(request)
        if candidate.is_file():
            return _file(request, candidate, "no-cache")
        if "." in relative.rsplit("/", 1)[-1]:
            # A missing file (a name with a dot, as the history fallback of Vite's dev
            # server decides), not a route of the app: 404, not index.html as a script.
            return _not_found(request)
    return _index(request, root, path)


def _login_url() -> str:
    try:
        return reverse("admin:login")
    except NoReverseMatch:
        return str(django_settings.LOGIN_URL)


def _relative(path: str) -> str | None:
    """``path`` as a clean relative path; ``None`` for ``..``, hidden names, NUL, ``\\``."""
    if "\x00" in path or "\\" in path:
        return None
    parts = [p for p in path.split("/") if p]
    if any(p.startswith(".") for p in parts):  # "..", ".env", ".git"
        return None
    relative = posixpath.normpath("/".join(parts)) if parts else ""
    return "" if relative == "." else relative


def _not_found(request: HttpRequest) -> HttpResponseBase:
    return _unavailable(
        request,
        f"No file of the admin UI at {request.path}.",
        "Rebuild the UI into OJS_ADMIN_UI_DIR if files are missing.",
    )


def _file(request: HttpRequest, file: Path, cache_control: str) -> HttpResponseBase:
    stat = file.stat()
    last_modified = formatdate(stat.st_mtime, usegmt=True)
    conditional = get_conditional_response(request, last_modified=int(stat.st_mtime))
    if conditional is not None:
        conditional["Last-Modified"] = last_modified
        return conditional
    content_type, encoding = mimetypes.guess_type(file.name)
    response = FileResponse(
        file.open("rb"), content_type=content_type or "application/octet-stream"
    )
    if encoding:  # never gzip-decoded by the browser: it is a file to download
        response["Content-Type"] = "application/octet-stream"
    response["Last-Modified"] = last_modified
    response["Cache-Control"] = cache_control
    response["X-Content-Type-Options"] = "nosniff"
    return response


def _index(request: HttpRequest, root: Path, path: str) -> HttpResponseBase:
    index = root / "index.html"
    if not index.is_file():
        return _unavailable(
            request,
            f"OJS_ADMIN_UI_DIR ({root}) has no index.html.",
            "Build the UI (npx vite build in ojs-admin-ui writes dist-app/) and point "
            "OJS_ADMIN_UI_DIR at dist-app/.",
        )
    with index.open("rb") as f:
        page = f.read(MAX_INDEX_BYTES).decode("utf-8", errors="replace")
    # The UI's root, as the browser sees it (SCRIPT_NAME included): request.path less the
    # part of it this view was given.
    base = request.path[: len(request.path) - len(path)] if path else request.path
    if not base.endswith("/"):
        base += "/"
    response = HttpResponse(inject(page, base, shim_attributes(request, base)))
    response["Content-Type"] = "text/html; charset=utf-8"
    # It carries a CSRF token: no shared cache may keep it.
    response["Cache-Control"] = "no-store"
    response["X-Content-Type-Options"] = "nosniff"
    return response


def shim_attributes(request: HttpRequest, base: str) -> dict[str, str]:
    """The shim's ``<script>`` attributes: its URL and where the CSRF token is."""
    header = str(django_settings.CSRF_HEADER_NAME)
    header = header.removeprefix("HTTP_").replace("_", "-")
    return {
        "src": f"{base}{SHIM_PATH}",
        # get_token also makes CsrfViewMiddleware send the cookie with this response.
        "data-csrf-token": get_token(request),
        "data-csrf-cookie": "" if django_settings.CSRF_USE_SESSIONS else _cookie_name(),
        "data-csrf-header": header,
    }


def _cookie_name() -> str:
    return "" if django_settings.CSRF_COOKIE_HTTPONLY else str(django_settings.CSRF_COOKIE_NAME)


def inject(page: str, base: str, script: dict[str, str]) -> str:
    """``page`` with ``<base href>`` and the shim's ``<script>`` first in its ``<head>``.

    First, so the base applies to every relative URL after it and the shim wraps
    ``fetch`` before the app's module script runs.
    """
    attributes = " ".join(f'{name}="{html.escape(value)}"' for name, value in script.items())
    tags = f'<base href="{html.escape(iri_to_uri(base))}"><script {attributes}></script>'
    lower = page.lower()
    start = lower.find("<head")
    end = lower.find(">", start) if start != -1 else -1
    if end == -1:
        return tags + page
    return page[: end + 1] + tags + page[end + 1 :]
