"""The UUIDv7s made for jobs and events (``django_ojs.ids``): increasing, on the clock."""

from __future__ import annotations

import copy
import os
import pickle
import threading
import time
import uuid

import pytest
from uuid6 import uuid7 as uuid6_uuid7

from django_ojs import ids


def millisecond(value: uuid.UUID) -> int:
    return value.int >> 80


def test_ids_made_fast_stay_on_the_clock():
    """uuid6's uuid7 moves its millisecond on by one per id made within the same one;
    100,000 of ours are all made within the time they took."""
    before = time.time_ns() // 1_000_000
    made = [ids.uuid7() for _ in range(50_000)] + ids.uuid7s(50_000)
    after = time.time_ns() // 1_000_000
    assert made == sorted(made) and len(set(made)) == 100_000
    assert before <= millisecond(made[0]) and millisecond(made[-1]) <= after
    assert {m.version for m in made[::997]} == {7} and {m.variant for m in made[::997]} == {
        uuid.RFC_4122
    }


def test_ids_sort_after_those_made_before_and_before_later_uuid6_ones():
    before = ids.uuid7()
    batch = ids.uuid7s(1_000)
    after = ids.uuid7()
    assert before < batch[0] and batch == sorted(batch) and batch[-1] < after
    assert ids.uuid7s(0) == [] and len(ids.uuid7s(1)) == 1


def test_ids_never_count_into_the_variant_bits(monkeypatch):
    """A fresh id whose random bits are one short of their maximum: counting 10 up from
    it would carry into the variant, so another is drawn."""
    near_end = (uuid6_uuid7().int | ids.RAND_B) - 1
    draws = iter([near_end, uuid6_uuid7().int])
    monkeypatch.setattr(ids, "_last", 0)  # a new millisecond: a fresh id is drawn
    monkeypatch.setattr(ids, "_fresh", lambda: next(draws))
    made = ids.uuid7s(10)
    assert near_end not in {m.int for m in made} and made == sorted(made)
    assert {m.variant for m in made} == {uuid.RFC_4122} and {m.version for m in made} == {7}


def test_ids_of_one_millisecond_draw_fresh_bits_when_the_count_would_overflow(monkeypatch):
    last = ((time.time_ns() // 1_000_000 + 60_000) << 80) | (0x7 << 76) | (0b10 << 62) | ids.RAND_B
    monkeypatch.setattr(ids, "_last", last)  # the same millisecond, its count at the end
    made = ids.uuid7()
    assert made.int > last and made.variant == uuid.RFC_4122 and made.version == 7


def test_ids_made_by_threads_at_once_are_all_distinct():
    made: list[list[uuid.UUID]] = [[] for _ in range(4)]

    def make(out: list[uuid.UUID]) -> None:
        for _ in range(200):
            out.extend(ids.uuid7s(5))
            out.append(ids.uuid7())

    threads = [threading.Thread(target=make, args=(out,)) for out in made]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    everything = [m for out in made for m in out]
    assert len(set(everything)) == len(everything) == 4 * 200 * 6
    assert all(out == sorted(out) for out in made)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_does_not_count_on_from_its_parents_last_id():
    ids.uuid7()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what it knows of the parent's last id
        os.write(write, str(ids._last).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read) as pipe:
        assert pipe.read() == "0"


def test_ids_are_the_uuids_their_ints_make():
    for made in ids.uuid7s(3):
        same = uuid.UUID(int=made.int)
        assert (made, hash(made), str(made), made.version) == (same, hash(same), str(same), 7)
        assert (made.is_safe, type(made)) == (same.is_safe, uuid.UUID)
        assert copy.deepcopy(made) == pickle.loads(pickle.dumps(made)) == made


def test_the_models_default_ids_are_these_on_the_clock():
    """Jobs, events and workflows made through the ORM take their ids from here too:
    uuid6's own, made this fast, would run ahead of the clock."""
    from django_ojs.models import Event, Job, Workflow

    before = time.time_ns() // 1_000_000
    made = [model().id for model in (Job, Event, Workflow) for _ in range(10_000)]
    after = time.time_ns() // 1_000_000
    assert made == sorted(made) and len(set(made)) == len(made)
    assert before <= millisecond(made[0]) and millisecond(made[-1]) <= after
