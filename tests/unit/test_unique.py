"""The unique policy (OJS unique-jobs §2) and its key (§4): validation and computation."""

from __future__ import annotations

import hashlib

import pytest

from django_ojs import unique
from django_ojs.exceptions import ValidationError


def _key(policy, *, type="email.send", queue="default", args=(), meta=None):
    rule = unique.policy(policy, list(args), meta or {})
    return unique.key(rule, type=type, queue=queue, args=list(args), meta=meta or {})


def test_key_is_sha256_of_the_canonical_dimensions():
    args = [{"user_id": 42, "template": "welcome", "locale": "en-US"}]
    got = _key({"keys": ["type", "queue", "args"], "args_keys": ["user_id"]},
               queue="notifications", args=args)  # fmt: skip
    canonical = '{"args":[{"user_id":42}],"queue":"notifications","type":"email.send"}'
    assert got == hashlib.sha256(canonical.encode()).hexdigest()
    assert len(got) == 64 and got == got.lower()


def test_type_is_always_part_of_the_key():
    assert _key({"keys": ["args"]}, args=[1]) != _key({"keys": ["args"]}, type="sms.send", args=[1])
    assert unique.policy({"keys": ["args"]}, [1], {}).keys == ("type", "args")


def test_key_ignores_object_key_order_and_unicode_form():
    a = _key({"keys": ["args"]}, args=[{"b": 1, "a": "caf\u00e9"}])
    b = _key({"keys": ["args"]}, args=[{"a": "cafe\u0301", "b": 1}])
    assert a == b


def test_integral_floats_hash_like_integers():
    assert _key({"keys": ["args"]}, args=[1.0]) == _key({"keys": ["args"]}, args=[1])
    assert _key({"keys": ["args"]}, args=[1.5]) != _key({"keys": ["args"]}, args=[1])


def test_queue_dimension_separates_queues_only_when_listed():
    assert _key({"keys": ["type"]}, queue="a") == _key({"keys": ["type"]}, queue="b")
    assert _key({"keys": ["queue"]}, queue="a") != _key({"keys": ["queue"]}, queue="b")


def test_meta_dimension_uses_the_listed_keys_only():
    one = _key({"keys": ["meta"], "meta_keys": ["tenant"]}, meta={"tenant": "acme", "trace": "1"})
    two = _key({"keys": ["meta"], "meta_keys": ["tenant"]}, meta={"tenant": "acme", "trace": "2"})
    other = _key({"keys": ["meta"], "meta_keys": ["tenant"]}, meta={"tenant": "zeta"})
    assert one == two != other


def test_key_alias_and_args_key_names():
    # digest 8.24: "key" is accepted for "keys"; a name that is no dimension is an args key.
    rule = unique.policy({"key": ["user_id"]}, [{"user_id": 1, "x": 2}], {})
    assert rule.keys == ("type", "args") and rule.args_keys == ("user_id",)


def test_defaults():
    rule = unique.policy({}, [], {})
    assert rule.keys == ("type",)
    assert rule.states == unique.DEFAULT_STATES
    assert rule.on_conflict == "reject" and rule.period_ms is None
    assert unique.policy({"on_conflict": "use_existing"}, [], {}).on_conflict == "ignore"
    assert unique.policy({"period": "PT1H"}, [], {}).period_ms == 3_600_000


@pytest.mark.parametrize(
    ("policy", "field"),
    [
        ({"keys": ["type", "argz"], "args_keys": None, "bogus": 1}, "unique"),
        ({"keys": "type"}, "unique.keys"),
        ({"keys": ["meta"]}, "unique.meta_keys"),
        ({"keys": ["args"], "args_keys": ["missing"]}, "unique.args_keys"),
        ({"args_keys": ["a"]}, "unique.args_keys"),
        ({"period": "3600s"}, "unique.period"),
        ({"period": 3600}, "unique.period"),
        ({"states": ["finished"]}, "unique.states"),
        ({"states": []}, "unique.states"),
        ({"on_conflict": "merge"}, "unique.on_conflict"),
        ({"keys": ["type"], "key": ["type"]}, "unique"),
    ],
)
def test_invalid_policies_are_refused_naming_the_field(policy, field):
    with pytest.raises(ValidationError) as info:
        unique.policy(policy, [{"a": 1}], {})
    assert info.value.field == field
