"""Webhooks without a database: signing (webhooks §8), filters (§5.2), the address check."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress

import pytest

from django_ojs.exceptions import ValidationError
from django_ojs.webhooks import DELIVER_TYPE, addresses, filters, signing

BODY = b'{"type":"job.completed","data":{"queue":"payments"}}'


# ---------------------------------------------------------------- signing


def test_sign__is_hmac_sha256_of_timestamp_dot_body():
    expected = hmac.new(b"s3cret", b"1708030665." + BODY, hashlib.sha256).hexdigest()
    assert signing.sign("s3cret", 1708030665, BODY) == f"sha256={expected}"


def test_signature_header__one_signature_per_secret_by_commas():
    header = signing.signature_header(["new", "old"], 10, BODY)
    assert header == f"{signing.sign('new', 10, BODY)},{signing.sign('old', 10, BODY)}"


def test_verify__accepts_either_signature_within_the_tolerance():
    header = signing.signature_header(["new", "old"], 1000, BODY)
    assert signing.verify("new", "1000", BODY, header, now=1000)
    assert signing.verify("old", "1000", BODY, header, now=1000 + 299)


@pytest.mark.parametrize(
    ("secret", "timestamp", "body", "now"),
    [
        ("other", "1000", BODY, 1000),  # wrong secret
        ("new", "1001", BODY, 1000),  # timestamp changed
        ("new", "1000", BODY + b" ", 1000),  # body changed
        ("new", "1000", BODY, 1000 + 301),  # replayed too late
        ("new", "nope", BODY, 1000),  # not a timestamp
    ],
)
def test_verify__refuses_tampering_and_replay(secret, timestamp, body, now):
    header = signing.sign("new", 1000, BODY)
    assert not signing.verify(secret, timestamp, body, header, now=now)


def test_new_secret__is_prefixed_and_random():
    one, two = signing.new_secret(), signing.new_secret()
    assert one.startswith("whsec_") and len(one) > 40 and one != two


def test_headers__carry_every_required_header():
    out = signing.headers(
        event_type="job.completed",
        delivery_id="del_1",
        subscription_id="sub_1",
        timestamp=5,
        signature="sha256=ab",
        user_agent="OJS-Webhook/1.0",
    )
    assert out == {
        "Content-Type": "application/json",
        "User-Agent": "OJS-Webhook/1.0",
        "X-OJS-Event-Type": "job.completed",
        "X-OJS-Delivery-ID": "del_1",
        "X-OJS-Subscription-ID": "sub_1",
        "X-OJS-Signature": "sha256=ab",
        "X-OJS-Timestamp": "5",
    }


# ---------------------------------------------------------------- filters


@pytest.mark.parametrize(
    ("events", "event_type", "expected"),
    [
        (["job.completed"], "job.completed", True),
        (["job.completed"], "job.failed", False),
        (["job.*"], "job.failed", True),
        (["job.*"], "jobs.failed", False),
        (["job.*"], "queue.paused", False),
        (["*"], "worker.started", True),
        (["workflow.*", "job.discarded"], "job.discarded", True),
    ],
)
def test_matches__event_types_and_wildcards(events, event_type, expected):
    assert filters.matches(events, {}, event_type=event_type, queue="q", job_type="t") is expected


@pytest.mark.parametrize(
    ("flt", "queue", "job_type", "expected"),
    [
        ({"queues": ["payments"]}, "payments", "x", True),
        ({"queues": ["payments"]}, "email", "x", False),
        ({"queues": ["payments"]}, None, None, False),
        ({"job_types": ["payment.process"]}, "q", "payment.process", True),
        ({"job_types": ["payment.*"]}, "q", "payment.refund", True),
        ({"job_types": ["payment.*"]}, "q", "invoice.make", False),
        ({"queues": ["payments"], "job_types": ["a.b"]}, "payments", "a.c", False),
        ({"queues": ["payments"], "job_types": ["a.b"]}, "payments", "a.b", True),
    ],
)
def test_matches__the_filter_narrows_by_queue_and_job_type(flt, queue, job_type, expected):
    got = filters.matches(["*"], flt, event_type="job.completed", queue=queue, job_type=job_type)
    assert got is expected


def test_is_internal__a_delivery_s_own_events_are_never_delivered():
    assert filters.is_internal("job.completed", DELIVER_TYPE)
    assert filters.is_internal("webhook.test", None)
    assert not filters.is_internal("job.completed", "email.send")


def test_validate_events__keeps_order_drops_repeats():
    assert filters.validate_events(["job.*", "*", "job.*"]) == ["job.*", "*"]


@pytest.mark.parametrize("bad", [None, [], "job.*", [1], ["job.**"], ["a b"], ["x" * 300]])
def test_validate_events__refuses_what_is_not_a_list_of_types(bad):
    with pytest.raises(ValidationError) as info:
        filters.validate_events(bad)
    assert info.value.field is not None and info.value.field.startswith("events")


@pytest.mark.parametrize(
    "bad", ["q", {"queue": ["a"]}, {"queues": "a"}, {"queues": [1]}, {"job_types": ["a b"]}]
)
def test_validate_filter__refuses_unknown_keys_and_bad_lists(bad):
    with pytest.raises(ValidationError):
        filters.validate_filter(bad)


def test_validate_filter__drops_empty_lists():
    assert filters.validate_filter({"queues": [], "job_types": ["a.*"]}) == {"job_types": ["a.*"]}
    assert filters.validate_filter(None) == {}


# ---------------------------------------------------------------- addresses


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("::1", "loopback"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("172.31.255.254", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "link-local"),  # cloud metadata
        ("fe80::1", "link-local"),
        ("fc00::1", "private"),
        ("100.64.0.1", "shared"),
        ("100.127.255.254", "shared"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("240.0.0.1", "reserved|private"),  # is_private includes 240/4 on some Pythons
        ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped
        ("::ffff:10.0.0.1", "private"),
        ("2002:7f00:1::", "loopback"),  # 6to4 of 127.0.0.1
    ],
)
def test_refusal__non_public_addresses(address, reason):
    assert addresses.refusal(ipaddress.ip_address(address)) in reason.split("|")


@pytest.mark.parametrize("address", ["93.184.216.34", "8.8.8.8", "172.32.0.1", "2606:4700::1111"])
def test_refusal__public_addresses_pass(address):
    assert addresses.refusal(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize("host", ["127.0.0.1", "[::1]", "10.0.0.7", "169.254.169.254"])
def test_checked__refuses_literal_private_hosts(host):
    parts = addresses.parse_url(f"https://{host}/hook", allow_http=False)
    with pytest.raises(addresses.AddressRefused):
        addresses.checked(parts.hostname or "", 443, allow_private=False)


@pytest.mark.parametrize("host", ["2130706433", "0x7f.1", "127.1", "0"])
def test_checked__refuses_other_spellings_of_loopback(host):
    # The resolver reads these as 127.0.0.1 (0.0.0.0 for "0"): the check is on what the
    # host resolves to, not on how it is written.
    with pytest.raises(addresses.AddressRefused):
        addresses.checked(host, 80, allow_private=False)


def test_checked__refuses_a_name_that_resolves_to_loopback():
    with pytest.raises(addresses.AddressRefused, match="loopback"):
        addresses.checked("localhost", 443, allow_private=False)


def test_checked__allows_private_when_configured():
    found = addresses.checked("localhost", 443, allow_private=True)
    assert found and all(a.is_loopback for a in found)


def test_checked__an_unknown_name_does_not_resolve():
    with pytest.raises(addresses.Unresolvable):
        addresses.checked("no-such-host.invalid", 443, allow_private=False)


@pytest.mark.parametrize(
    ("url", "allow_http"),
    [
        ("http://example.com/x", False),
        ("ftp://example.com/x", True),
        ("file:///etc/passwd", True),
        ("https://user:pw@example.com/", False),
        ("https:///nohost", False),
        ("https://example.com:99999/", False),
        ("https://exa mple.com/", False),
        ("", False),
        (None, False),
        ("https://example.com/" + "a" * 3000, False),
    ],
)
def test_parse_url__refuses_other_schemes_credentials_and_junk(url, allow_http):
    with pytest.raises(ValidationError):
        addresses.parse_url(url, allow_http=allow_http)


def test_parse_url__http_only_when_allowed():
    assert addresses.parse_url("http://example.com/x", allow_http=True).hostname == "example.com"
    assert addresses.parse_url("https://example.com:8443/x?a=1", allow_http=False).port == 8443


# ---------------------------------------------------------------- system checks


def check_ids() -> list[str]:
    from django_ojs import checks

    return [m.id for m in checks.check_webhooks()]


def test_check__defaults_are_clean():
    assert check_ids() == []


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("OJS_WEBHOOKS_RETRY", {"max_attempts": -1}, "ojs.E010"),
        ("OJS_WEBHOOKS_RETRY", {"initial_interval": "soon"}, "ojs.E010"),
        ("OJS_WEBHOOKS_QUEUE", "Web Hooks", "ojs.E011"),
        ("OJS_WEBHOOKS_TIMEOUT", 0, "ojs.E012"),
        ("OJS_WEBHOOKS_MAX_RESPONSE_BYTES", "64k", "ojs.E012"),
        ("OJS_ALLOWED_JOB_TYPES", ["email.*"], "ojs.W004"),
    ],
)
def test_check__bad_webhook_settings(settings, name, value, expected):
    setattr(settings, name, value)
    assert check_ids() == [expected]


@pytest.mark.parametrize("allowed", [["ojs.*", "email.*"], ["ojs.webhook.deliver"], None])
def test_check__an_allowlist_with_the_delivery_type_is_clean(settings, allowed):
    settings.OJS_ALLOWED_JOB_TYPES = allowed
    assert check_ids() == []
