"""The webhook endpoints of the HTTP API (OJS webhooks §6, §8.3, §10): subscriptions, the
test ping, secret rotation and deliveries; bad input is a 4xx OJS error, never a 500."""

from __future__ import annotations

import pytest

from django_ojs import lifecycle
from django_ojs.lifecycle import webhooks
from django_ojs.models import AuditEntry, WebhookSubscription
from django_ojs.webhooks import signing
from tests.factories import WebhookSubscriptionFactory
from tests.integration.api_support import assert_ojs_error, client
from tests.integration.webhook_support import complete_a_job, deliveries, run_delivery

pytestmark = pytest.mark.django_db

SUBS = "/webhooks/subscriptions"


@pytest.fixture
def api():
    return client("admin")


@pytest.fixture(autouse=True)
def _settle_gaps_at_once(monkeypatch):
    # Sequence numbers of rolled-back tests are not given back on PostgreSQL.
    monkeypatch.setattr(webhooks, "GAP_WAIT", 0.0)


def test_create__201_with_the_secret_shown_once(api, open_network, receiver):
    response = api.post(
        SUBS,
        {
            "url": receiver.url,
            "events": ["job.completed", "job.failed"],
            "filter": {"queues": ["payments"]},
            "metadata": {"description": "Payment job monitoring"},
        },
    )
    assert response.status_code == 201, response.body
    body = response.body
    assert body["id"].startswith("sub_") and body["secret"].startswith("whsec_")
    assert body["url"] == receiver.url and body["active"] is True
    assert body["events"] == ["job.completed", "job.failed"]
    assert body["filter"] == {"queues": ["payments"]}
    assert body["metadata"] == {"description": "Payment job monitoring"}
    assert response["Location"].endswith(f"/ojs/v1/webhooks/subscriptions/{body['id']}")

    # Webhooks §6.3: never again.
    got = api.get(f"{SUBS}/{body['id']}")
    assert got.status_code == 200 and "secret" not in got.body
    assert got.body["id"] == body["id"]
    listed = api.get(SUBS)
    assert listed.status_code == 200
    assert [s["id"] for s in listed.body["items"]] == [body["id"]]
    assert "secret" not in listed.body["items"][0]
    assert listed.body["pagination"]["total"] == 1
    assert AuditEntry.objects.filter(action="webhook.create").count() == 1


def test_list__paginates_by_page_and_per_page(api):
    made = [WebhookSubscriptionFactory() for _ in range(3)]
    response = api.get(f"{SUBS}?page=2&per_page=2")
    assert [s["id"] for s in response.body["items"]] == [made[2].public_id]
    assert response.body["pagination"]["total"] == 3
    assert response.body["pagination"]["page"] == 2


def test_update__patch_and_put_change_the_given_fields(api):
    sub = WebhookSubscriptionFactory()
    response = api.request(
        "PATCH", f"{SUBS}/{sub.public_id}", {"events": ["job.*"], "active": False}
    )
    assert response.status_code == 200, response.body
    assert response.body["events"] == ["job.*"] and response.body["active"] is False
    response = api.request("PUT", f"{SUBS}/{sub.id}", {"active": True})
    assert response.body["active"] is True and response.body["events"] == ["job.*"]
    sub.refresh_from_db()
    assert sub.active and sub.events == ["job.*"]


def test_delete__then_404(api):
    sub = WebhookSubscriptionFactory()
    response = api.delete(f"{SUBS}/{sub.public_id}")
    assert response.status_code == 200 and response.body == {"deleted": True, "id": sub.public_id}
    assert not WebhookSubscription.objects.exists()
    assert_ojs_error(api.get(f"{SUBS}/{sub.public_id}"), 404, "not_found")
    assert_ojs_error(api.delete(f"{SUBS}/{sub.public_id}"), 404, "not_found")


def test_delete__cancels_the_pending_deliveries(api, open_network, receiver):
    sub = lifecycle.create_webhook(receiver.url, ["job.*"])
    complete_a_job()
    lifecycle.dispatch_webhooks()
    assert {j.state for j in deliveries()} == {"available"}
    api.delete(f"{SUBS}/{sub.public_id}")
    assert {j.state for j in deliveries()} == {"cancelled"}
    assert run_delivery() is None and receiver.requests == []


def test_rotate_secret__a_new_secret_and_the_old_one_s_end(api):
    sub = WebhookSubscriptionFactory()
    response = api.post(f"{SUBS}/{sub.public_id}/rotate-secret")
    assert response.status_code == 200, response.body
    assert response.body["secret"].startswith("whsec_") and response.body["secret"] != sub.secret
    assert response.body["previous_secret_expires_at"]
    sub.refresh_from_db()
    assert sub.previous_secret and sub.secret == response.body["secret"]


def test_test__pings_the_endpoint_with_a_signed_webhook_test_event(api, open_network, receiver):
    made = api.post(SUBS, {"url": receiver.url, "events": ["*"]}).body
    response = api.post(f"{SUBS}/{made['id']}/test")
    assert response.status_code == 200, response.body
    assert response.body["success"] is True and response.body["status_code"] == 200
    assert response.body["response_body"] == "OK"
    assert isinstance(response.body["response_time_ms"], int)
    [request] = receiver.requests
    assert request.json["type"] == "webhook.test"
    assert request.headers["x-ojs-event-type"] == "webhook.test"
    assert signing.verify(
        made["secret"],
        request.headers["x-ojs-timestamp"],
        request.body,
        request.headers["x-ojs-signature"],
    )


def test_test__reports_a_failing_endpoint(api, open_network, receiver):
    made = api.post(SUBS, {"url": receiver.url, "events": ["*"]}).body
    receiver.status = 500
    response = api.post(f"{SUBS}/{made['id']}/test")
    assert response.status_code == 200
    assert response.body["success"] is False and response.body["status_code"] == 500
    assert response.body["error"]["type"] == "webhook.server_error"


def test_deliveries__list_get_and_retry_a_dead_one(api, open_network, receiver):
    sub = lifecycle.create_webhook(receiver.url, ["job.completed"])
    complete_a_job()
    lifecycle.dispatch_webhooks()
    receiver.status = 404
    dead = run_delivery()
    assert dead.state == "discarded"

    listed = api.get(f"/webhooks/deliveries?subscription_id={sub.public_id}")
    assert listed.status_code == 200
    [item] = listed.body["items"]
    assert item["id"] == f"del_{dead.id}" and item["dead"] is True
    assert item["subscription_id"] == sub.public_id and item["event_type"] == "job.completed"
    assert item["status_code"] == 404 and item["last_error"]["type"] == "webhook.client_error"
    assert api.get("/webhooks/deliveries?state=completed").body["items"] == []
    assert api.get(f"/webhooks/deliveries/{item['id']}").body == item

    retried = api.post(f"/webhooks/deliveries/{item['id']}/retry")
    assert retried.status_code == 200, retried.body
    assert retried.body["state"] == "available"
    receiver.status = 200
    assert run_delivery().state == "completed"
    # Only a dead delivery goes back.
    assert_ojs_error(api.post(f"/webhooks/deliveries/{item['id']}/retry"), 409)


def test_private_url__refused_without_the_setting(api, settings):
    settings.OJS_WEBHOOKS_ALLOW_HTTP = True
    for url in ("http://127.0.0.1:9/x", "http://localhost/x", "http://[::1]/x", "http://10.1.1.1/"):
        error = assert_ojs_error(api.post(SUBS, {"url": url, "events": ["*"]}), 400)
        assert error["details"]["field"] == "url", url
    sub = WebhookSubscriptionFactory()
    response = api.request("PATCH", f"{SUBS}/{sub.public_id}", {"url": "http://192.168.0.1/"})
    assert_ojs_error(response, 400)
    assert not WebhookSubscription.objects.filter(url__contains="192.168").exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"events": ["*"]}, "url"),
        ({"url": "https://example.com/x"}, "events"),
        ({"url": "http://example.com/x", "events": ["*"]}, "url"),
        ({"url": "ftp://example.com/x", "events": ["*"]}, "url"),
        ({"url": 5, "events": ["*"]}, "url"),
        ({"url": "https://example.com/x", "events": "job.*"}, "events"),
        ({"url": "https://example.com/x", "events": [None]}, "events[0]"),
        ({"url": "https://example.com/x", "events": ["*"], "filter": []}, "filter"),
        ({"url": "https://example.com/x", "events": ["*"], "filter": {"x": 1}}, "filter.x"),
        ({"url": "https://example.com/x", "events": ["*"], "metadata": []}, "metadata"),
        ({"url": "https://example.com/x", "events": ["*"], "active": "yes"}, "active"),
        ({"url": "https://example.com/x", "events": ["*"], "secret": "short"}, "secret"),
        ({"url": "https://example.com/x", "events": ["*"], "nope": 1}, "nope"),
        ({"url": "https://ex\u0000ample.com/", "events": ["*"]}, "url"),
    ],
)
def test_create__bad_input_is_a_400_naming_the_field(api, body, field):
    error = assert_ojs_error(api.post(SUBS, body), 400)
    assert error["details"]["field"] == field
    assert not WebhookSubscription.objects.exists()


@pytest.mark.parametrize(
    "body", [{"secret": "whsec_0123456789abcdef"}, {"id": "x"}, {"events": []}, {"active": 1}]
)
def test_update__bad_input_is_a_400(api, body):
    sub = WebhookSubscriptionFactory()
    assert_ojs_error(api.request("PATCH", f"{SUBS}/{sub.public_id}", body), 400)


@pytest.mark.parametrize("raw", ["[]", '"x"', "{", "null"])
def test_create__a_body_that_is_not_an_object_is_a_400(api, raw):
    response = api.request("POST", SUBS, raw=raw)
    assert_ojs_error(response, 400)


@pytest.mark.parametrize(
    "path",
    [
        f"{SUBS}/nope",
        f"{SUBS}/sub_00000000-0000-0000-0000-000000000000",
        f"{SUBS}/nope/test",
        f"{SUBS}/nope/rotate-secret",
        "/webhooks/deliveries/nope",
        "/webhooks/deliveries/del_00000000-0000-0000-0000-000000000000/retry",
    ],
)
def test_unknown_ids__404(api, path):
    method = "POST" if path.endswith(("test", "secret", "retry")) else "GET"
    assert_ojs_error(api.request(method, path), 404, "not_found")


def test_deliveries__bad_filters_are_a_400_or_404(api):
    assert_ojs_error(api.get("/webhooks/deliveries?state=nope"), 400)
    assert_ojs_error(api.get("/webhooks/deliveries?subscription_id=nope"), 404)


def test_manifest__declares_the_webhooks_extension(api):
    body = api.get("/ojs/manifest").body
    assert {
        "name": "webhooks",
        "uri": "urn:ojs:ext:webhooks",
        "version": "1.0.0-rc.1",
    } in body["extensions"]["official"]
    assert body["capabilities"]["webhooks"] is True
