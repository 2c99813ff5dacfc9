"""Pagination of list endpoints (HB §17): ``limit``, an opaque ``cursor``, and ``offset``.

The cursor is base64url JSON (an offset, or the last event sequence number for keyset
pages). Clients must not interpret it. Reads query parameters only.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from django.db.models import Model, QuerySet

from django_ojs.exceptions import InvalidRequest
from django_ojs.validation import INT64_MAX

DEFAULT_LIMIT = 50
#: HB §17.1: at most 200 per page (larger requests are clamped, not refused).
MAX_LIMIT = 200

_T = TypeVar("_T")


def encode_cursor(data: dict[str, Any]) -> str:
    raw = json.dumps(data, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> dict[str, Any]:
    try:
        data = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (ValueError, binascii.Error, UnicodeDecodeError):
        data = None
    if not isinstance(data, dict):
        raise InvalidRequest(
            "cursor is not a cursor this server issued", details={"field": "cursor"}
        )
    return data


def _int_param(params: Mapping[str, str], name: str, default: int, minimum: int) -> int:
    value = params.get(name)
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise InvalidRequest(f"{name} must be an integer", details={"field": name}) from None
    if not minimum <= number <= INT64_MAX:  # SQL OFFSET/LIMIT are 64-bit
        raise InvalidRequest(
            f"{name} must be an integer from {minimum} to {INT64_MAX}", details={"field": name}
        )
    return number


@dataclass
class Page:
    """What a list request asked for."""

    limit: int
    offset: int = 0
    after: int | None = None  # keyset position (events)

    def wrap(self, total: int, count: int, next_position: dict[str, Any] | None) -> dict[str, Any]:
        """The ``pagination`` object for a page of ``count`` items out of ``total``: HB §17's
        ``limit``/``offset``/``has_more`` and, for pages by position, the ``page`` and
        ``per_page`` of rate-limiting §10.3 and the admin API (spec-readings.md)."""
        out: dict[str, Any] = {
            "total": total,
            "limit": self.limit,
            "offset": self.offset,
            "has_more": next_position is not None,
        }
        if self.after is None:
            out["page"] = self.offset // self.limit + 1
            out["per_page"] = self.limit
        if next_position is not None:
            out["next_cursor"] = encode_cursor(next_position)
        return out


def page(params: Mapping[str, str]) -> Page:
    """Read ``limit`` (default 50, clamped to 200), ``cursor`` and ``offset``.

    ``per_page`` and ``page`` (from 1) are read too, as rate-limiting §10.3 and the admin
    API name them (the official admin UI sends them to every list): ``limit`` wins over
    ``per_page``, and ``cursor`` or ``offset`` over ``page``.
    """
    per_page = _int_param(params, "per_page", DEFAULT_LIMIT, 1)
    limit = min(_int_param(params, "limit", per_page, 1), MAX_LIMIT)
    cursor = params.get("cursor")
    if cursor:
        data = decode_cursor(cursor)
        offset, after = data.get("o", 0), data.get("s")
        if (
            not isinstance(offset, int)
            or not 0 <= offset <= INT64_MAX
            or (after is not None and (not isinstance(after, int) or not 0 <= after <= INT64_MAX))
        ):
            raise InvalidRequest(
                "cursor is not a cursor this server issued", details={"field": "cursor"}
            )
        return Page(limit=limit, offset=offset, after=after)
    if params.get("offset") in (None, "") and params.get("page") not in (None, ""):
        number = _int_param(params, "page", 1, 1)
        if (number - 1) * limit > INT64_MAX:
            raise InvalidRequest("page is beyond the last possible page", details={"field": "page"})
        return Page(limit=limit, offset=(number - 1) * limit)
    return Page(limit=limit, offset=_int_param(params, "offset", 0, 0))


def offset_page(
    items: Sequence[_T] | QuerySet[Model, _T], total: int, page: Page
) -> tuple[list[_T], dict[str, Any]]:
    """Slice ``items`` (a QuerySet or list) for ``page``; return the items and ``pagination``."""
    chunk = list(items[page.offset : page.offset + page.limit])
    end = page.offset + len(chunk)
    next_position = {"o": end} if end < total else None
    return chunk, page.wrap(total, len(chunk), next_position)
