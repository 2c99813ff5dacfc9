"""Authentication and scopes (HB §5, OJS security): secure by default, 401/403 as OJS errors."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import override_settings
from django.utils import timezone

from django_ojs import apikeys
from django_ojs.models import ApiKey
from tests.factories import JobFactory
from tests.integration.api_support import OJSClient, assert_ojs_error, client, key

pytestmark = pytest.mark.django_db

JOB = {"type": "a.b", "args": []}
# (method, path, body, scope that may call it); {id} is a real job id.
CALLS = [
    ("POST", "/jobs", JOB, "producer"),
    ("POST", "/jobs/batch", {"jobs": [JOB]}, "producer"),
    ("GET", "/jobs/{id}", None, "producer"),
    ("DELETE", "/jobs/{id}", None, "producer"),
    ("POST", "/jobs/{id}/activate", None, "producer"),
    ("GET", "/events", None, "producer"),
    ("GET", "/queues", None, "producer"),
    ("POST", "/workers/fetch", {"queues": ["default"]}, "worker"),
    ("POST", "/workers/ack", {"job_id": "{id}"}, "worker"),
    ("POST", "/workers/nack", {"job_id": "{id}", "error": {}}, "worker"),
    ("POST", "/workers/heartbeat", {"worker_id": "w"}, "worker"),
    ("POST", "/workers/progress", {"job_id": "{id}", "percentage": 5}, "worker"),
    ("PUT", "/jobs/{id}/progress", {"progress": 0.5}, "worker"),
    ("GET", "/queues/default/stats", None, "admin"),
    ("POST", "/queues/default/pause", None, "admin"),
    ("POST", "/queues/default/resume", None, "admin"),
    ("GET", "/dead-letter", None, "admin"),
    ("POST", "/dead-letter/{id}/retry", None, "admin"),
    ("DELETE", "/dead-letter/{id}", None, "admin"),
]


def call(api: OJSClient, method: str, path: str, body):
    job = JobFactory()
    body = {k: (str(job.id) if v == "{id}" else v) for k, v in body.items()} if body else body
    return api.request(method, path.replace("{id}", str(job.id)), body)


@pytest.mark.parametrize(("method", "path", "body", "scope"), CALLS)
def test_anonymous_requests__401_with_a_bearer_challenge(method, path, body, scope):
    response = call(OJSClient(), method, path, body)
    error = assert_ojs_error(response, 401, "unauthenticated")
    assert response["WWW-Authenticate"] == 'Bearer realm="ojs"'
    assert error["retryable"] is False


@pytest.mark.parametrize(("method", "path", "body", "scope"), CALLS)
@pytest.mark.parametrize("granted", ["producer", "worker", "admin"])
def test_scopes__allow_their_endpoints_and_refuse_others_with_403(
    method, path, body, scope, granted
):
    response = call(client(granted), method, path, body)
    if granted == scope or granted == "admin":
        assert response.status_code not in (401, 403), response.body
    else:
        error = assert_ojs_error(response, 403, "permission_denied")
        assert error["details"] == {"required_scope": scope, "granted_scopes": [granted]}


@pytest.mark.parametrize("path", ["/ojs/manifest", "/ojs/v1/health", "/ojs/v1/unknown"])
def test_public_endpoints__need_no_credentials(path):
    assert OJSClient().get(path).status_code in (200, 404)


@pytest.mark.parametrize(
    "header",
    [
        "Bearer ojs_000000000000_wrong",
        "Bearer not-a-key",
        "Bearer",
        "Bearer a b",
        "Bearer ojs_ab",
    ],
)
def test_bad_keys__401(header):
    api = OJSClient()
    api.headers["Authorization"] = header
    assert_ojs_error(api.get("/queues"), 401, "unauthenticated")


def test_right_prefix_wrong_secret__401():
    _stored, raw = apikeys.create("k", "admin")
    api = OJSClient(raw[:-4] + "AAAA")
    assert_ojs_error(api.get("/queues"), 401, "unauthenticated")


def test_revoked_key__401_at_once_and_other_keys_keep_working():
    stored, raw = apikeys.create("k", "admin")
    other = client("admin")
    api = OJSClient(raw)
    assert api.get("/queues").status_code == 200
    apikeys.revoke(stored)
    assert_ojs_error(api.get("/queues"), 401, "unauthenticated")
    assert other.get("/queues").status_code == 200


def test_other_authorization_schemes__are_not_keys():
    api = OJSClient()
    api.headers["Authorization"] = "Basic dXNlcjpwYXNz"
    assert_ojs_error(api.get("/queues"), 401, "unauthenticated")


def test_staff_session__may_use_admin_endpoints_with_csrf():
    staff = User.objects.create_user("ops", password="pw", is_staff=True)
    api = OJSClient(enforce_csrf_checks=True)
    api.client.force_login(staff)
    assert api.get("/dead-letter").status_code == 200
    # A session is a browser credential: unsafe methods need the CSRF token.
    assert_ojs_error(api.post("/queues/default/pause"), 403, "permission_denied")
    token = "A" * 32  # a CSRF secret: the cookie and the header must carry the same one
    api.client.cookies["csrftoken"] = token
    assert api.post("/queues/default/pause", headers={"X-CSRFToken": token}).status_code == 200


def test_non_staff_session__403():
    user = User.objects.create_user("joe", password="pw")
    api = OJSClient()
    api.client.force_login(user)
    assert_ojs_error(api.get("/dead-letter"), 403, "permission_denied")


@override_settings(OJS_API_AUTH="none")
@pytest.mark.parametrize(("method", "path", "body", "scope"), CALLS)
def test_auth_none__opens_every_endpoint(method, path, body, scope):
    assert call(OJSClient(), method, path, body).status_code not in (401, 403)


@override_settings(OJS_API_AUTH="none")
def test_auth_none__is_shown_in_the_manifest():
    auth = OJSClient().get("/ojs/manifest").body["extensions"]["authentication"]
    assert auth == {"schemes": [], "required": False}


# --------------------------------------------------------------------------- key storage


def test_create__stores_only_a_scrypt_hash():
    stored, raw = apikeys.create("billing", "producer")
    assert raw.startswith(f"ojs_{stored.prefix}_") and len(raw) >= 4 + 12 + 1 + 43
    assert stored.hashed_secret.startswith("scrypt$")
    assert raw.split("_", 2)[2] not in stored.hashed_secret
    assert apikeys.authenticate(raw) == stored


def test_create__validates_name_and_scope():
    with pytest.raises(ValueError, match="scope"):
        apikeys.create("x", "root")
    with pytest.raises(ValueError, match="name"):
        apikeys.create("  ", "admin")


def test_authenticate__records_last_use_at_most_once_a_minute():
    stored, raw = apikeys.create("k", "worker")
    apikeys.authenticate(raw)
    first = ApiKey.objects.get(pk=stored.pk).last_used_at
    assert first is not None
    apikeys.authenticate(raw)
    assert ApiKey.objects.get(pk=stored.pk).last_used_at == first


def test_revoke__by_prefix_is_idempotent():
    stored, raw = apikeys.create("k", "worker")
    revoked = apikeys.revoke(stored.prefix)
    when = revoked.revoked_at
    assert when is not None and when <= timezone.now()
    assert apikeys.revoke(stored.prefix).revoked_at == when
    assert apikeys.authenticate(raw) is None
    with pytest.raises(ApiKey.DoesNotExist):
        apikeys.revoke("nope")


def test_check_secret__rejects_malformed_hashes():
    assert apikeys.check_secret("s", "md5$x") is False
    assert apikeys.check_secret("s", "garbage") is False


def test_key_fixture_helper_gives_a_working_key():
    assert OJSClient(key("producer")).get("/queues").status_code == 200
