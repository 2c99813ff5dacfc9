"""The official admin UI served at ``/ojs/admin/`` (``django_ojs/api/views/admin_ui.py``).

A small stand-in for a built UI (``index.html``, ``assets/``, ``favicon.svg``) in a temporary
directory; the real one runs in ``tests/acceptance/test_official_admin_ui.py``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client, override_settings

from django_ojs import checks
from django_ojs.api.views.admin_ui import inject
from django_ojs.models import Queue
from tests.integration.api_support import OJS, assert_ojs_error

pytestmark = pytest.mark.django_db

INDEX = """<!DOCTYPE html>
<html lang="en">
  <head>
    <meta charset="UTF-8" />
    <link rel="icon" type="image/svg+xml" href="./favicon.svg" />
    <script type="module" crossorigin src="./assets/index-abc123.js"></script>
  </head>
  <body><div id="root"></div></body>
</html>
"""


@pytest.fixture
def ui_dir(tmp_path: Path, settings) -> Path:
    root = tmp_path / "dist-app"
    (root / "assets").mkdir(parents=True)
    (root / "index.html").write_text(INDEX)
    (root / "assets" / "index-abc123.js").write_text("console.log('ui');\n")
    (root / "assets" / "index-abc123.css").write_text("body{}\n")
    (root / "favicon.svg").write_text("<svg xmlns='http://www.w3.org/2000/svg'/>\n")
    (root / ".env").write_text("SECRET=hidden\n")
    (tmp_path / "secret.txt").write_text("outside the UI directory\n")
    (root / "escape.txt").symlink_to(tmp_path / "secret.txt")
    settings.OJS_ADMIN_UI_DIR = str(root)
    return root


@pytest.fixture
def staff() -> Client:
    client = Client()
    client.force_login(User.objects.create_user("ops", password="pw", is_staff=True))
    return client


def envelope(response) -> dict:
    response.body = json.loads(response.content)
    return assert_ojs_error(response, 404, "not_found")


def shim(page: str) -> dict[str, str]:
    tag = re.search(r"<script ([^>]*)></script>", page)
    assert tag, page
    return dict(re.findall(r'([\w-]+)="([^"]*)"', tag.group(1)))


# ------------------------------------------------------------------------ not configured


@pytest.mark.parametrize("path", ["/ojs/admin", "/ojs/admin/", "/ojs/admin/queues/foo"])
def test_without_the_setting__an_ojs_404_says_how_to_enable_it(path):
    error = envelope(Client().get(path))
    assert "not enabled" in error["message"]
    assert "OJS_ADMIN_UI_DIR" in error["details"]["hint"]


def test_without_index_html__an_ojs_404_names_the_directory(staff, ui_dir):
    (ui_dir / "index.html").unlink()
    error = envelope(staff.get("/ojs/admin/"))
    assert str(ui_dir) in error["message"] and "index.html" in error["message"]


def test_other_paths_under_the_mount__stay_the_apis_404():
    response = Client().get("/ojs/administrator")
    assert response["Content-Type"] == OJS and response.status_code == 404


# ------------------------------------------------------------------------ staff login


def test_anonymous__is_sent_to_the_admin_login_and_back(ui_dir):
    response = Client().get("/ojs/admin/queues/foo?page=2")
    assert response.status_code == 302
    assert response["Location"] == "/admin/login/?next=/ojs/admin/queues/foo%3Fpage%3D2"


@pytest.mark.parametrize("path", ["/ojs/admin/", "/ojs/admin/assets/index-abc123.js"])
def test_logged_in_but_not_staff__403(ui_dir, path):
    client = Client()
    client.force_login(User.objects.create_user("joe", password="pw"))
    assert client.get(path).status_code == 403


def test_unsafe_methods__405(staff, ui_dir):
    response = staff.post("/ojs/admin/queues")
    assert response.status_code == 405
    assert response["Allow"] == "GET, HEAD"


# ------------------------------------------------------------------------ pages and files


@pytest.mark.parametrize(
    ("path", "base"),
    [
        ("/ojs/admin/", "/ojs/admin/"),
        ("/ojs/admin", "/ojs/admin/"),
        ("/ojs/admin/queues", "/ojs/admin/"),
        ("/ojs/admin/queues/foo", "/ojs/admin/"),
        ("/ojs/admin/workflows/builder/", "/ojs/admin/"),
        ("/ojs/admin/index.html", "/ojs/admin/"),
    ],
)
def test_every_deep_link__gets_index_html_with_base_and_shim(staff, ui_dir, path, base):
    response = staff.get(path)
    assert response.status_code == 200
    assert response["Content-Type"] == "text/html; charset=utf-8"
    assert response["Cache-Control"] == "no-store"
    page = response.content.decode()
    head = page.index("<head>") + len("<head>")
    # First in <head>: the base before any relative URL, the shim before the app's module.
    assert page[head:].startswith(f'<base href="{base}"><script src="{base}_django_ojs/csrf.js"')
    assert '<script type="module" crossorigin src="./assets/index-abc123.js">' in page
    attrs = shim(page)
    assert attrs["data-csrf-cookie"] == "csrftoken"
    assert attrs["data-csrf-header"] == "X-CSRFTOKEN"
    assert attrs["data-csrf-token"]
    assert response.cookies["csrftoken"].value  # the cookie the shim reads


@pytest.mark.parametrize(
    ("path", "content_type", "text"),
    [
        ("assets/index-abc123.js", ("text/javascript", "application/javascript"), "ui"),
        ("assets/index-abc123.css", ("text/css",), "body"),
        ("favicon.svg", ("image/svg+xml",), "<svg"),
        ("_django_ojs/csrf.js", ("text/javascript", "application/javascript"), "fetch"),
    ],
)
def test_files__are_sent_with_their_content_type(staff, ui_dir, path, content_type, text):
    response = staff.get(f"/ojs/admin/{path}")
    assert response.status_code == 200
    assert response["Content-Type"].split(";")[0] in content_type
    assert response["X-Content-Type-Options"] == "nosniff"
    assert text in b"".join(response.streaming_content).decode()
    again = staff.get(
        f"/ojs/admin/{path}", headers={"If-Modified-Since": response["Last-Modified"]}
    )
    assert again.status_code == 304


def test_a_missing_file__404_not_index_html(staff, ui_dir):
    envelope(staff.get("/ojs/admin/assets/index-gone.js"))
    envelope(staff.get("/ojs/admin/favicon.ico"))


@pytest.mark.parametrize(
    "path",
    [
        "/ojs/admin/../secret.txt",
        "/ojs/admin/assets/../../secret.txt",
        "/ojs/admin/%2e%2e/secret.txt",
        "/ojs/admin/assets/%2e%2e/%2e%2e/secret.txt",
        "/ojs/admin/..%2fsecret.txt",
        "/ojs/admin/..%5csecret.txt",
        "/ojs/admin/escape.txt",  # a symbolic link out of the directory
        "/ojs/admin/.env",
        "/ojs/admin/assets/%00.js",
        "/ojs/admin//etc/passwd",  # a deep link of the app (no dot): index.html
        "/ojs/admin/%2fetc%2fpasswd",
    ],
)
def test_no_path_leads_out_of_the_ui_directory(staff, ui_dir, path):
    response = staff.get(path)
    body = response.content if not response.streaming else b"".join(response.streaming_content)
    assert b"outside the UI directory" not in body
    assert b"SECRET=hidden" not in body
    assert b"root:" not in body
    if path.endswith("passwd"):
        assert response.status_code == 200 and b'<div id="root">' in body
    else:
        assert response.status_code == 404


@pytest.mark.parametrize("name", ["CSRF_USE_SESSIONS", "CSRF_COOKIE_HTTPONLY"])
def test_without_a_readable_csrf_cookie__the_shim_uses_the_page_token(staff, ui_dir, name):
    with override_settings(**{name: True}):
        attrs = shim(staff.get("/ojs/admin/").content.decode())
    assert attrs["data-csrf-cookie"] == ""
    assert attrs["data-csrf-token"]


def test_the_page_token__lets_the_session_write(ui_dir):
    """What the shim sends (the page's token in X-CSRFToken) passes Django's CSRF check."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(
        User.objects.create_user("ops", password="pw", is_staff=True, is_superuser=True)
    )
    Queue.objects.create(name="default")
    url = "/ojs/v1/admin/queues/default/pause"
    # The UI's request: JSON content type, no body.
    assert client.post(url, content_type="application/json").status_code == 403  # no shim
    token = shim(client.get("/ojs/admin/").content.decode())["data-csrf-token"]
    response = client.post(url, content_type="application/json", headers={"X-CSRFToken": token})
    assert response.status_code == 200, response.content
    assert Queue.objects.get(name="default").paused


def test_inject__without_a_head_puts_the_tags_first():
    assert inject("<p>x</p>", "/ojs/admin/", {"src": "s.js"}) == (
        '<base href="/ojs/admin/"><script src="s.js"></script><p>x</p>'
    )


def test_inject__escapes_the_attributes():
    page = inject('<HEAD lang="en"></HEAD>', '/a"b/', {"data-x": '"><script>'})
    assert page == (
        '<HEAD lang="en"><base href="/a%22b/"><script data-x="&quot;&gt;&lt;script&gt;">'
        "</script></HEAD>"
    )


# ------------------------------------------------------------------------ system check


def test_check__a_directory_without_index_html_warns(tmp_path):
    with override_settings(OJS_ADMIN_UI_DIR=str(tmp_path)):
        (message,) = checks.check_admin_ui()
    assert message.id == "ojs.W003" and str(tmp_path) in message.msg


def test_check__a_built_ui_or_no_setting_is_quiet(ui_dir):
    assert checks.check_admin_ui() == []
    with override_settings(OJS_ADMIN_UI_DIR=None):
        assert checks.check_admin_ui() == []
