"""The UUIDv7s this process makes for jobs and events: increasing, and on the clock.

A UUIDv7 (RFC 9562 §5.7) starts with its millisecond. uuid6's ``uuid7()`` keeps its ids
increasing by moving that millisecond one on whenever it is called again within the
same millisecond, so a process making ids faster than one a millisecond makes them
ahead of the clock, further the longer it goes on: 100,000 calls in 0.17 s, and the last
id was 100 s in the future. A job's id is its creation time here (first in, first out
within a priority; the time partitions of ``ojs_job``), so a producer enqueueing
thousands of jobs a second would have had them sort after jobs other processes enqueued
seconds later.

The ids made here take one uuid6 id per millisecond and count up from it within that
millisecond (RFC 9562 §6.2, method 2, "monotonic random", with an increment of 1): on
the clock, increasing within the process, and one random draw (a system call) per
millisecond instead of one per id. A child process forgets the parent's last id, so
that two children never count up from the same one.
"""

from __future__ import annotations

import os
import threading
import time
from datetime import UTC, datetime, timedelta
from uuid import UUID, SafeUUID

import uuid6

#: The 62 random bits that end a UUIDv7 (``rand_b``): what the ids of one millisecond
#: count up in.
RAND_B = (1 << 62) - 1

#: The version, random and variant bits that follow an id's millisecond.
_AFTER_MILLISECOND = (1 << 80) - 1

_lock = threading.Lock()
_last = 0  # the last id made, as an int (0: none yet in this process)


def uuid7() -> UUID:
    """A new UUIDv7, greater than every one this process made before."""
    return _uuid(_reserve(1))


def uuid7s(n: int) -> list[UUID]:
    """``n`` new UUIDv7s in increasing order, greater than every one made before."""
    if n <= 0:
        return []
    first = _reserve(n)
    return [_uuid(first + k) for k in range(n)]


#: The version (7) and variant (0b10) bits of a UUIDv7, in place.
_VERSION_AND_VARIANT = 0x7 << 76 | 0b10 << 62
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MILLISECOND = timedelta(milliseconds=1)


def uuid7_at(when: datetime) -> UUID:
    """A UUIDv7 of ``when``'s millisecond and 74 strong-random bits.

    An event's id is made this way, from the event's own time: an id then says where
    its event is in ``ojs_event_time_idx`` (see ``Event.objects.with_id``), and no
    unique index is kept on the ids (74 random bits per millisecond do not collide).
    """
    rand = int.from_bytes(os.urandom(10))
    return _uuid(
        _millisecond(when) << 80 | _VERSION_AND_VARIANT | (rand >> 62 & 0xFFF) << 64 | rand & RAND_B
    )


def uuid7_floor(moment: datetime) -> UUID:
    """The smallest UUIDv7 of ``moment``'s millisecond: ids of later times sort above it.

    A job partition holds the ids from ``uuid7_floor(start)`` to ``uuid7_floor(end)``.
    """
    return UUID(int=(_millisecond(moment) & 0xFFFF_FFFF_FFFF) << 80)


def uuid7_time(value: UUID) -> datetime:
    """The millisecond a UUIDv7 starts with (its creation time), as a datetime."""
    return _EPOCH + (value.int >> 80) * _MILLISECOND


def _millisecond(moment: datetime) -> int:
    """``moment``'s millisecond since the Unix epoch, in whole numbers (no float)."""
    return (moment - _EPOCH) // _MILLISECOND


def _reserve(n: int) -> int:
    """The first of ``n`` consecutive ids, none made before (as ints)."""
    global _last
    with _lock:
        millisecond = time.time_ns() // 1_000_000
        if millisecond > _last >> 80 or _last & RAND_B > RAND_B - n:
            # A new millisecond, or counting on would carry into the variant bits.
            first = _fresh()
            while first & RAND_B > RAND_B - n:
                first = _fresh()
            if first <= _last:  # the clock went back: on from the last id's millisecond
                first = ((_last >> 80) + 1) << 80 | first & _AFTER_MILLISECOND
        else:  # the same millisecond as the last id (or the clock went back)
            first = _last + 1
        _last = first + n - 1
        return first


def _fresh() -> int:
    """uuid6's UUIDv7: this millisecond's (or the next, when it was called in this one
    already) and 74 fresh random bits."""
    return uuid6.uuid7().int


def _forget() -> None:
    global _last
    _last = 0


if hasattr(os, "register_at_fork"):  # not on Windows
    os.register_at_fork(after_in_child=_forget)

_new, _set, _UNKNOWN = object.__new__, object.__setattr__, SafeUUID.unknown


def _uuid(value: int) -> UUID:
    """``UUID(int=value)`` for a ``value`` known to be a valid 128-bit UUID, without
    ``UUID.__init__``'s parsing of its five kinds of input: 0.2 against 0.5 µs. The
    attributes set are the two ``UUID`` has (its ``__slots__``), as ``__init__`` and
    ``__setstate__`` set them. The standard library's ``UUID``: uuid6's subclass costs
    1.5 µs more each."""
    made = _new(UUID)
    _set(made, "int", value)
    _set(made, "is_safe", _UNKNOWN)
    return made
