"""Authentication and scopes (HB §5, OJS security): secure by default, 401/403 as OJS errors."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.test import override_settings
from django.utils import timezone
from uuid6 import uuid7

from django_ojs import apikeys
from django_ojs.models import ApiKey, Job
from tests.clock import ManualClock
from tests.factories import JobFactory, QueueFactory
from tests.integration.api_support import OJSClient, assert_ojs_error, client, key

pytestmark = pytest.mark.django_db

JOB = {"type": "a.b", "args": []}
ROLES = ["producer", "worker", "operator", "admin"]
# (method, path, body, roles that may call it); {id} is a real job id. OJS security §7.5.
ENQUEUERS = {"producer", "operator", "admin"}
WORKERS = {"worker", "admin"}
OPERATORS = {"operator", "admin"}
ADMINS = {"admin"}
CALLS = [
    ("POST", "/jobs", JOB, ENQUEUERS),
    ("POST", "/jobs/batch", {"jobs": [JOB]}, ENQUEUERS),
    ("GET", "/jobs/{id}", None, OPERATORS),
    ("DELETE", "/jobs/{id}", None, OPERATORS),
    ("POST", "/jobs/{id}/activate", None, OPERATORS),
    ("GET", "/events", None, OPERATORS),
    ("GET", "/queues", None, OPERATORS),
    ("GET", "/queues/default/stats", None, OPERATORS),
    ("GET", "/queues/default", None, OPERATORS),
    ("GET", "/dead-letter", None, OPERATORS),
    ("POST", "/dead-letter/{id}/retry", None, OPERATORS),
    ("POST", "/workers/fetch", {"queues": ["default"]}, WORKERS),
    ("POST", "/workers/ack", {"job_id": "{id}"}, WORKERS),
    ("POST", "/workers/nack", {"job_id": "{id}", "error": {}}, WORKERS),
    ("POST", "/workers/heartbeat", {"worker_id": "w"}, WORKERS),
    ("POST", "/workers/progress", {"job_id": "{id}", "percentage": 5}, WORKERS),
    ("PUT", "/jobs/{id}/progress", {"progress": 0.5}, WORKERS),
    ("POST", "/queues/default/pause", None, ADMINS),
    ("POST", "/queues/default/resume", None, ADMINS),
    ("DELETE", "/dead-letter/{id}", None, ADMINS),
    ("GET", "/webhooks/subscriptions", None, ADMINS),
    ("POST", "/webhooks/subscriptions", {"url": "https://a.example/", "events": []}, ADMINS),
    ("GET", "/webhooks/deliveries", None, ADMINS),
]


def call(api: OJSClient, method: str, path: str, body, *, queue: str = "default"):
    job = JobFactory(queue=queue)
    body = {k: (str(job.id) if v == "{id}" else v) for k, v in body.items()} if body else body
    return api.request(method, path.replace("{id}", str(job.id)), body)


@pytest.mark.parametrize(("method", "path", "body", "roles"), CALLS)
def test_anonymous_requests__401_with_a_bearer_challenge(method, path, body, roles):
    response = call(OJSClient(), method, path, body)
    error = assert_ojs_error(response, 401, "unauthenticated")
    assert response["WWW-Authenticate"] == 'Bearer realm="ojs"'
    assert error["retryable"] is False


@pytest.mark.parametrize(("method", "path", "body", "roles"), CALLS)
@pytest.mark.parametrize("granted", ROLES)
def test_scopes__follow_the_permission_matrix_and_refuse_others_with_403(
    method, path, body, roles, granted
):
    response = call(client(granted), method, path, body)
    if granted in roles:
        assert response.status_code not in (401, 403), response.body
    else:
        error = assert_ojs_error(response, 403, "permission_denied")
        assert error["details"]["required_scopes"] == [r for r in ROLES if r in roles]
        assert error["details"]["granted_scopes"] == [granted]
        assert error["details"]["operation"] in ("enqueue", "dequeue", "cancel", "inspect", "admin")


def test_producer__may_only_enqueue():
    producer = client("producer")
    job = producer.enqueue("a.b")
    for response in (
        producer.get(f"/jobs/{job['id']}"),
        producer.delete(f"/jobs/{job['id']}"),
        producer.get("/queues"),
        producer.get("/dead-letter"),
        producer.get("/events"),
        producer.post("/workers/fetch", {"queues": ["default"]}),
    ):
        assert_ojs_error(response, 403, "permission_denied")
    operator = client("operator")
    assert operator.get(f"/jobs/{job['id']}").body["job"]["id"] == job["id"]
    assert operator.get("/queues").status_code == 200
    assert operator.get("/dead-letter").status_code == 200
    assert operator.delete(f"/jobs/{job['id']}").body["job"]["state"] == "cancelled"


def test_worker__may_fetch_ack_nack_beat_and_report_progress_only():
    client("producer").enqueue("a.b")
    client("producer").enqueue("a.b")
    worker = client("worker")
    first, second = worker.fetch(worker_id="w1", count=2)
    assert (
        worker.post(
            "/workers/progress", {"job_id": first["id"], "percentage": 50, "worker_id": "w1"}
        ).status_code
        == 200
    )
    assert worker.post("/workers/heartbeat", {"worker_id": "w1"}).status_code == 200
    assert (
        worker.post("/workers/ack", {"job_id": first["id"], "worker_id": "w1"}).status_code == 200
    )
    nack = {"job_id": second["id"], "worker_id": "w1", "error": {"message": "x"}}
    assert worker.post("/workers/nack", nack).status_code == 200
    for response in (
        worker.post("/jobs", JOB),
        worker.get(f"/jobs/{first['id']}"),
        worker.get("/queues"),
    ):
        assert_ojs_error(response, 403, "permission_denied")


# --------------------------------------------------------------------------- queue allowlists


def limited(scope: str, *queues: str) -> OJSClient:
    return OJSClient(apikeys.create(f"limited-{scope}", scope, queues=list(queues))[1])


def assert_queue_denied(response, queue: str, operation: str) -> None:
    error = assert_ojs_error(response, 403, "permission_denied")
    assert error["details"]["queue"] == queue
    assert error["details"]["operation"] == operation
    assert f"'{operation}' permission on queue '{queue}'" in error["message"]


def test_queue_allowlist__enqueue_only_to_allowed_queues():
    api = limited("producer", "orders", "mail.*")
    assert api.post("/jobs", {**JOB, "options": {"queue": "orders"}}).status_code == 201
    assert api.post("/jobs", {**JOB, "queue": "mail.bulk"}).status_code == 201
    assert_queue_denied(api.post("/jobs", JOB), "default", "enqueue")
    batch = {"jobs": [{**JOB, "queue": "orders"}, {**JOB, "queue": "billing"}]}
    assert_queue_denied(api.post("/jobs/batch", batch), "billing", "enqueue")
    assert Job.objects.count() == 2  # the refused batch wrote nothing


def test_queue_allowlist__fetch_ack_nack_progress_only_on_allowed_queues():
    other = JobFactory(queue="billing", active=True, worker_id="w1")
    api = limited("worker", "orders")
    assert api.post("/workers/fetch", {"queues": ["orders"], "worker_id": "w1"}).status_code == 200
    assert_queue_denied(
        api.post("/workers/fetch", {"queues": ["orders", "billing"]}), "billing", "dequeue"
    )
    body = {"job_id": str(other.id), "worker_id": "w1"}
    assert_queue_denied(api.post("/workers/ack", body), "billing", "dequeue")
    assert_queue_denied(api.post("/workers/nack", {**body, "error": {}}), "billing", "dequeue")
    assert_queue_denied(
        api.post("/workers/progress", {**body, "percentage": 1}), "billing", "dequeue"
    )
    other.refresh_from_db()
    assert other.state == "active"


def test_queue_allowlist__ack_checks_the_queue_in_its_own_statement():
    """A queue-limited worker's ACK is one statement, like any other ACK; a job outside
    its queues is refused with its 403, whatever the job's state, and stays as it was."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    mine = JobFactory(queue="mail.eu", active=True, worker_id="w1")
    exact = JobFactory(queue="orders", active=True, worker_id="w1")
    lookalike = JobFactory(queue="mailx.eu", active=True, worker_id="w1")  # not "mail." + …
    finished = JobFactory(queue="billing", state="completed")
    api = limited("worker", "orders", "mail.*")
    api.post("/workers/fetch", {"queues": ["orders"], "worker_id": "w1"})  # key verified
    with CaptureQueriesContext(connection) as captured:
        response = api.post("/workers/ack", {"job_id": str(mine.id), "worker_id": "w1"})
    assert response.status_code == 200, response.body
    statements = [q["sql"] for q in captured.captured_queries]
    if connection.vendor == "postgresql":  # SQLite's ACK is several statements anyway
        assert len(statements) == 1, statements
    assert not any(s.startswith('SELECT "ojs_job"."queue"') for s in statements), statements
    assert api.post("/workers/ack", {"job_id": str(exact.id)}).status_code == 200
    assert_queue_denied(
        api.post("/workers/ack", {"job_id": str(lookalike.id)}), "mailx.eu", "dequeue"
    )
    assert_queue_denied(
        api.post("/workers/ack", {"job_id": str(finished.id)}), "billing", "dequeue"
    )
    lookalike.refresh_from_db()
    assert lookalike.state == "active"
    assert {Job.objects.get(pk=j.pk).state for j in (mine, exact)} == {"completed"}
    # Unknown jobs are still 404, as for any key.
    assert_ojs_error(api.post("/workers/ack", {"job_id": str(uuid7())}), 404, "not_found")


def test_queue_allowlist__inspect_cancel_and_lists_are_limited():
    mine = JobFactory(queue="orders")
    theirs = JobFactory(queue="billing")
    dead_mine = JobFactory(queue="orders", state="discarded")
    JobFactory(queue="billing", state="discarded")
    api = limited("operator", "orders")
    assert api.get(f"/jobs/{mine.id}").status_code == 200
    assert_queue_denied(api.get(f"/jobs/{theirs.id}"), "billing", "inspect")
    assert_queue_denied(api.delete(f"/jobs/{theirs.id}"), "billing", "cancel")
    assert_queue_denied(api.post(f"/jobs/{theirs.id}/activate"), "billing", "cancel")
    assert_queue_denied(api.get("/queues/billing/stats"), "billing", "inspect")
    assert_queue_denied(api.get("/queues/billing"), "billing", "inspect")
    assert api.get("/queues/orders").body["stats"]["available"] == 1
    QueueFactory(name="orders")
    QueueFactory(name="billing")
    assert [q["name"] for q in api.get("/queues").body["queues"]] == ["orders"]
    assert [j["id"] for j in api.get("/dead-letter").body["jobs"]] == [str(dead_mine.id)]
    retry = api.post(f"/dead-letter/{dead_mine.id}/retry", {"override": {"queue": "billing"}})
    assert_queue_denied(retry, "billing", "cancel")
    theirs.refresh_from_db()
    assert theirs.state == "available"


def test_queue_allowlist__events_are_limited_to_allowed_queues():
    admin = client("admin")
    admin.enqueue("a.b", queue="orders")
    admin.enqueue("a.b", queue="billing")
    events = limited("operator", "orders").get("/events").body["events"]
    assert events and {e["data"].get("queue", "orders") for e in events} <= {"orders"}


def test_queue_allowlist__empty_means_every_queue():
    api = limited("operator")
    assert api.post("/jobs", {**JOB, "queue": "anything"}).status_code == 201


def test_update__changes_scope_and_queues_at_once():
    stored, raw = apikeys.create("k", "producer")
    api = OJSClient(raw)
    assert_ojs_error(api.get("/queues"), 403, "permission_denied")
    apikeys.update(stored.prefix, scope="operator", queues=["orders"])
    assert api.get("/queues").status_code == 200
    assert_queue_denied(api.post("/jobs", JOB), "default", "enqueue")
    with pytest.raises(ValueError, match="queues"):
        apikeys.update(stored, queues=["Bad Q"])


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


def staff_user(username: str, *perms: str, superuser: bool = False) -> User:
    user = User.objects.create_user(username, password="pw", is_staff=True)
    user.is_superuser = superuser
    user.save()
    for perm in perms:
        app_label, codename = perm.split(".")
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label=app_label, codename=codename)
        )
    return User.objects.get(pk=user.pk)  # no cached permissions


def test_staff_session__may_use_admin_endpoints_with_csrf():
    staff = staff_user("ops", superuser=True)
    api = OJSClient(enforce_csrf_checks=True)
    api.client.force_login(staff)
    assert api.get("/dead-letter").status_code == 200
    # A session is a browser credential: unsafe methods need the CSRF token.
    assert_ojs_error(api.post("/queues/default/pause"), 403, "permission_denied")
    token = "A" * 32  # a CSRF secret: the cookie and the header must carry the same one
    api.client.cookies["csrftoken"] = token
    assert api.post("/queues/default/pause", headers={"X-CSRFToken": token}).status_code == 200


@pytest.mark.parametrize(
    ("perms", "allowed", "denied"),
    [
        # What the Django admin lets the same user do, the API lets them do.
        (("ojs.view_job",), ["inspect"], ["cancel", "manage", "enqueue"]),
        (("ojs.view_job", "ojs.cancel_job"), ["inspect", "cancel"], ["manage", "enqueue"]),
        (("ojs.add_job",), ["enqueue"], ["inspect"]),
        (
            ("ojs.view_job", "ojs.pause_queue", "ojs.purge_job", "ojs.direct_worker"),
            ["inspect", "manage"],
            ["cancel"],
        ),
        ((), [], ["inspect", "enqueue", "cancel", "manage"]),
    ],
)
def test_staff_session__may_do_what_its_django_permissions_allow(perms, allowed, denied):
    JobFactory(state="available", queue="default")
    target = JobFactory(state="available", queue="default")
    calls = {
        "inspect": lambda api: api.get("/dead-letter"),
        "enqueue": lambda api: api.post("/jobs", {"type": "a.b", "args": []}),
        "cancel": lambda api: api.delete(f"/jobs/{target.id}"),
        "manage": lambda api: api.post("/queues/default/pause"),
    }
    api = OJSClient()
    api.client.force_login(staff_user("ops", *perms))
    for operation in allowed:
        response = calls[operation](api)
        assert response.status_code in (200, 201), (operation, response.body)
    for operation in denied:
        error = assert_ojs_error(calls[operation](api), 403, "permission_denied")
        assert error["details"]["granted_scopes"] in (["staff"], ["operator"]), error


def test_staff_session__a_superuser_is_admin_and_staff_without_permissions_is_not():
    from django_ojs.api.permissions import ADMIN, OPERATOR, staff_principal

    assert staff_principal(staff_user("root", superuser=True)).role == ADMIN
    operator = staff_user("op", "ojs.view_job", "ojs.add_job", "ojs.cancel_job")
    assert staff_principal(operator).role == OPERATOR
    assert staff_principal(staff_user("plain")).operations == frozenset()


def test_non_staff_session__403():
    user = User.objects.create_user("joe", password="pw")
    api = OJSClient()
    api.client.force_login(user)
    assert_ojs_error(api.get("/dead-letter"), 403, "permission_denied")


@override_settings(OJS_API_AUTH="none")
@pytest.mark.parametrize(("method", "path", "body", "roles"), CALLS)
def test_auth_none__opens_every_endpoint(method, path, body, roles):
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


def test_authenticate__loads_the_key_as_the_orm_does():
    stored, raw = apikeys.create("scoped", "worker", queues=["mail.*", "billing"])
    apikeys.authenticate(raw)  # records last_used_at
    key = apikeys.authenticate(raw)
    names = [f.attname for f in ApiKey._meta.concrete_fields]
    assert {n: getattr(key, n) for n in names} == ApiKey.objects.values(*names).get(pk=stored.pk)
    assert key.queues == ["mail.*", "billing"] and key.last_used_at is not None
    assert key._state.adding is False and key._state.db == "default"


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
    assert OJSClient(key("operator")).get("/queues").status_code == 200


# ------------------------------------------- the verified-key cache and its bound


@pytest.fixture
def clock(monkeypatch):
    clock = ManualClock()
    monkeypatch.setattr(apikeys, "_clock", clock)
    apikeys.forget()
    yield clock
    apikeys.forget()


def other_process_sets(stored: ApiKey, **fields) -> None:
    """What another web process (or the admin on another server) writes: the row only."""
    assert ApiKey.objects.filter(pk=stored.pk).update(**fields) == 1


@override_settings(OJS_API_KEY_CACHE_SECONDS=5)
def test_key_revoked_elsewhere__stops_working_once_the_cache_bound_passes(clock):
    stored, raw = apikeys.create("k", "admin")
    api = OJSClient(raw)
    assert api.get("/queues").status_code == 200
    other_process_sets(stored, revoked_at=timezone.now())
    clock.now += 4.9  # within the bound: this process has not read the row again
    assert api.get("/queues").status_code == 200
    clock.now += 0.1  # the bound: the row is read, the revocation seen
    assert_ojs_error(api.get("/queues"), 401, "unauthenticated")
    clock.now += 100
    assert_ojs_error(api.get("/queues"), 401, "unauthenticated")


@override_settings(OJS_API_KEY_CACHE_SECONDS=5)
def test_key_narrowed_elsewhere__loses_its_rights_once_the_cache_bound_passes(clock):
    stored, raw = apikeys.create("k", "admin")
    api = OJSClient(raw)
    assert api.get("/queues").status_code == 200
    assert api.post("/workers/fetch", {"queues": ["billing"]}).status_code == 200
    other_process_sets(stored, scope="worker", queues=["email"])
    clock.now += 5
    assert_ojs_error(api.get("/queues"), 403, "permission_denied")  # scope
    assert_ojs_error(api.post("/workers/fetch", {"queues": ["billing"]}), 403, "permission_denied")
    assert api.post("/workers/fetch", {"queues": ["email"]}).status_code == 200


@override_settings(OJS_API_KEY_CACHE_SECONDS=5)
def test_key_changed_in_this_process__holds_at_once(clock):
    stored, raw = apikeys.create("k", "admin")
    api = OJSClient(raw)
    assert api.get("/queues").status_code == 200
    apikeys.update(stored, scope="producer")
    assert_ojs_error(api.get("/queues"), 403, "permission_denied")
    apikeys.revoke(stored)
    assert_ojs_error(api.post("/jobs", JOB), 401, "unauthenticated")


@override_settings(OJS_API_KEY_CACHE_SECONDS=0)
def test_key_cache_off__reads_the_row_on_every_request(clock):
    stored, raw = apikeys.create("k", "admin")
    api = OJSClient(raw)
    assert api.get("/queues").status_code == 200
    other_process_sets(stored, revoked_at=timezone.now())
    assert_ojs_error(api.get("/queues"), 401, "unauthenticated")


@override_settings(OJS_API_KEY_CACHE_SECONDS=5)
def test_key_cache__trusts_only_the_exact_key_it_verified(clock):
    stored, raw = apikeys.create("k", "admin")
    assert OJSClient(raw).get("/queues").status_code == 200
    # Same prefix, another secret: not the cached key, so its row and hash are checked.
    forged = raw[: raw.rindex("_") + 1] + "x" * 43
    assert_ojs_error(OJSClient(forged).get("/queues"), 401, "unauthenticated")
    assert apikeys.authenticate(raw) == stored


@override_settings(OJS_API_KEY_CACHE_SECONDS=5)
def test_key_cache__holds_a_bounded_number_of_keys(clock):
    for n in range(apikeys.CACHE_SIZE + 5):
        apikeys._trusted[f"fingerprint-{n}"] = (clock.now + 5, ApiKey(prefix="x"))
    assert len(apikeys._trusted) > apikeys.CACHE_SIZE
    _, raw = apikeys.create("k", "admin")
    assert apikeys.authenticate(raw) is not None
    assert len(apikeys._trusted) <= apikeys.CACHE_SIZE
