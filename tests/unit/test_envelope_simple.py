"""The short way through ``envelope.from_wire`` gives what the general way gives.

Most enqueue bodies carry a type, arguments and a queue (``_SIMPLE_BODY``); for those,
``from_wire`` skips the lookups of the options they do not carry. Whatever the body, valid
or not, the spec it returns, or the error it raises, must be the general path's.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from uuid6 import uuid7

from django_ojs import envelope
from django_ojs.exceptions import OJSError

MiB = 1024 * 1024

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.floats(allow_nan=False),
    st.text(max_size=12),
)  # fmt: skip
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


def mostly(valid, invalid):
    """``valid`` nine times in ten: bodies must get past the first check for the two
    paths to be compared on what they take from where (options over top level...)."""
    return st.integers(0, 9).flatmap(lambda n: valid if n else invalid)


types = mostly(st.sampled_from(["email.send", "a.b", "report.v2.build"]),
               st.one_of(st.sampled_from(["", "bad type", "a" * 300]), json_scalars))  # fmt: skip
queues = mostly(st.sampled_from(["default", "email", "a.b-c_d", "billing"]),
                st.one_of(st.none(), st.sampled_from(["", "bad queue", "q" * 300]),
                          st.integers()))  # fmt: skip
priorities = mostly(st.integers(-10, 10),
                    st.one_of(st.none(), st.integers(-200, 200),
                              st.sampled_from(["1", 1.5, True])))  # fmt: skip
ids = mostly(st.builds(lambda: str(uuid7())),
             st.one_of(st.none(), st.builds(lambda: str(uuid.uuid4())),
                       st.sampled_from(["nope", 7])))  # fmt: skip
args = mostly(st.lists(json_values, max_size=4), json_values)
metas = mostly(st.dictionaries(st.text(max_size=5), json_values, max_size=3),
               st.one_of(st.none(), json_values))  # fmt: skip


@st.composite
def bodies(draw):
    body = {}
    for name, strategy in (("type", types), ("args", args), ("meta", metas), ("id", ids),
                           ("queue", queues), ("priority", priorities)):  # fmt: skip
        if draw(st.integers(0, 4)) if name in ("type", "args") else draw(st.booleans()):
            body[name] = draw(strategy)
    if draw(st.integers(0, 3)):
        options = {}
        for name, strategy in (("queue", queues), ("priority", priorities)):
            if draw(st.booleans()):
                options[name] = draw(strategy)
        if draw(st.integers(0, 5)) == 0:  # an option of another kind: the general way
            options["timeout"] = draw(st.sampled_from([5, "x", None]))
        body["options"] = draw(mostly(st.just(options), st.one_of(st.none(), json_scalars)))
    return body


def outcome(body, max_bytes):
    try:
        return ("spec", envelope.from_wire(body, max_bytes=max_bytes))
    except OJSError as exc:
        return ("error", type(exc), exc.message, exc.details)


@settings(max_examples=1000, deadline=None)
@given(body=bodies(), max_bytes=st.sampled_from([MiB, 64]))
def test_simple_bodies__same_spec_or_error_as_the_general_path(body, max_bytes):
    short = outcome(body, max_bytes)
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(envelope.parse, "_SIMPLE_BODY", frozenset())
        general = outcome(body, max_bytes)
    assert short == general


@pytest.mark.parametrize(
    ("body", "queue", "priority"),
    [
        ({"type": "a.b", "args": [], "queue": "top", "options": {"queue": "opt"}}, "opt", 0),
        ({"type": "a.b", "args": [], "queue": "top", "options": {"queue": None}}, "top", 0),
        ({"type": "a.b", "args": [], "priority": 1, "options": {"priority": 2}}, "default", 2),
        ({"type": "a.b", "args": [], "priority": 1, "options": None}, "default", 1),
    ],
)
def test_simple_bodies__options_win_over_top_level(body, queue, priority):
    spec = envelope.from_wire(body, max_bytes=MiB)
    assert (spec.queue, spec.priority) == (queue, priority)


@pytest.mark.parametrize(
    "body",
    [
        {"type": "email.send", "args": ["a"], "options": {"queue": "email"}},
        {"type": "email.send", "args": [], "queue": "email", "priority": 3, "meta": {"k": 1}},
        {"type": "email.send", "args": [1], "id": str(uuid7()), "options": {"priority": -5}},
    ],
)
def test_simple_bodies__take_the_short_way(body, monkeypatch):
    def general_path_is_not_taken(*args, **kwargs):
        raise AssertionError("the general path ran")

    monkeypatch.setattr(envelope.parse, "first_duration_ms", general_path_is_not_taken)
    spec = envelope.from_wire(body, max_bytes=MiB)
    assert spec.type == "email.send" and spec.retry is None and spec.extra == {}
