"""The OJS wire rules on DRF: media types, parsing, rendering and request ids (HB §3-§6, §19).

DRF's defaults answer 406 to ``Accept: application/openjobspec+json`` and 415 to its
``Content-Type`` (digest §0.1 item 3); the classes here accept both OJS media types,
ignore ``Accept`` and always render JSON. No view logic and no database access.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import IO, Any, NoReturn

from django.http import HttpRequest
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.parsers import BaseParser
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request

from django_ojs import validation
from django_ojs.conf import settings
from django_ojs.exceptions import EnvelopeTooLarge, OJSError
from django_ojs.ids import uuid7

#: The spec version this binding speaks (HB §3.2); sent as ``OJS-Version`` on every response.
OJS_VERSION = "1.0"
OJS_MEDIA_TYPE = "application/openjobspec+json"
REQUEST_ID_HEADER = "X-Request-Id"
_REQUEST_ID_META = "HTTP_X_REQUEST_ID"  # how WSGI names it in META
# A client's X-Request-Id is echoed only when it is a sane token (no header injection).
_CLIENT_REQUEST_ID = re.compile(r"[A-Za-z0-9._:@/+=-]{1,128}")  # used with fullmatch


class MalformedBody(OJSError):
    """The request body is not valid JSON."""

    # ojs-errors §3.1 and conformance L0-OPS-015 name malformed JSON ``invalid_payload``
    # (JSON format §12 says ``invalid_request``; docs/explanation/spec-readings.md).
    code = "invalid_payload"
    http_status = 400


def too_large(size: int | None, limit: int) -> EnvelopeTooLarge:
    message = f"The request body exceeds the {limit}-byte limit."
    if size is not None:
        message = f"The request body is {size} bytes; the limit is {limit} bytes."
    return EnvelopeTooLarge(message, details={"size": size, "limit": limit})


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not valid JSON")


# json.loads(text, parse_constant=...) builds a decoder for each call; this one is shared,
# as json.loads shares its default decoder.
_decoder = json.JSONDecoder(parse_constant=_reject_constant)


def _loads(text: str) -> Any:
    """``json.loads(text, parse_constant=_reject_constant)``, with one decoder."""
    if text.startswith("\ufeff"):  # json.loads refuses a BOM before it decodes
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    return _decoder.decode(text)


class OJSJSONParser(BaseParser):
    """``application/openjobspec+json``: UTF-8 JSON, at most ``OJS_MAX_REQUEST_BYTES``."""

    media_type = OJS_MEDIA_TYPE

    def parse(
        self,
        stream: IO[Any],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        limit = settings.MAX_REQUEST_BYTES
        raw = stream.read(limit + 1)
        if len(raw) > limit:
            raise too_large(None, limit)
        # HB §4.2: bodies are UTF-8 whatever charset the Content-Type names.
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedBody("The request body is not valid UTF-8.") from None
        try:
            data = _loads(text)
        except RecursionError:  # the C decoder recurses once per level of nesting
            raise _too_deep() from None
        except ValueError as exc:
            raise MalformedBody(f"The request body is not valid JSON: {exc}.") from None
        # Each JSON field is checked against OJS_MAX_JSON_DEPTH where it is validated
        # (validation.check_json); this bounds the whole document, wrappers included. A
        # text with no more brackets than the limit cannot nest deeper: no walk for it.
        depth = settings.MAX_JSON_DEPTH + BODY_WRAPPER_DEPTH
        if text.count("[") + text.count("{") > depth and validation.json_text_depth_exceeds(
            raw, depth
        ):
            raise _too_deep()
        return data


#: Levels a request body may add around a JSON field: ``{"jobs": [{"args": ...}]}``.
BODY_WRAPPER_DEPTH = 4


def _too_deep() -> MalformedBody:
    return MalformedBody(
        "The request body nests arrays/objects too deeply: each JSON value may be nested "
        f"at most {settings.MAX_JSON_DEPTH} levels (OJS_MAX_JSON_DEPTH)."
    )


class JSONParser(OJSJSONParser):
    """``application/json``, which HB §4.1 makes an alias of the OJS media type."""

    media_type = "application/json"


class OJSRenderer(JSONRenderer):
    """JSON with the content type ``OJS_RESPONSE_CONTENT_TYPE`` and no charset parameter."""

    charset = None

    # DRF declares a plain attribute; it only ever reads it, so a read-only property is safe.
    @property
    def media_type(self) -> str:  # type: ignore[override]
        return settings.RESPONSE_CONTENT_TYPE

    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: Mapping[str, Any] | None = None,
    ) -> bytes:
        try:
            return super().render(data, None, renderer_context)
        except UnicodeEncodeError:
            # A lone surrogate (echoed in an error message) has no UTF-8 form: escape it.
            return json.dumps(
                data, cls=self.encoder_class, ensure_ascii=True, separators=(",", ":")
            ).encode()


class OJSContentNegotiation(DefaultContentNegotiation):
    """Parsers as usual; the renderer is always the OJS one (HB §4.3: never 406)."""

    def select_parser(self, request: Request, parsers: Iterable[BaseParser]) -> BaseParser | None:
        # DRF parses the request's media type again for each parser it tries. Without
        # parameters or wildcards, a media type matches a parser's exactly when the two
        # are equal, lower-cased; anything else goes the general way.
        content_type = request.content_type
        limit: int = getattr(self, "max_media_type_length", 256)  # the stubs omit it
        if (
            content_type
            and len(content_type) <= limit
            and ";" not in content_type
            and "*" not in content_type
        ):
            wanted = content_type.strip().lower()
            for parser in parsers:
                offered = parser.media_type
                if offered == wanted:
                    return parser
                if ";" in offered or "*" in offered or offered != offered.strip().lower():
                    break  # a parser the general rule may match otherwise
        return super().select_parser(request, parsers)

    def select_renderer(
        self, request: Request, renderers: Iterable[BaseRenderer], format_suffix: str | None = None
    ) -> tuple[BaseRenderer, str]:
        renderer = next(iter(renderers))
        return renderer, renderer.media_type


def request_id(django_request: HttpRequest) -> str:
    """The client's ``X-Request-Id`` when it is a sane token, else ``req_<UUIDv7>`` (HB §19)."""
    given: str = django_request.META.get(_REQUEST_ID_META, "")
    if given and _CLIENT_REQUEST_ID.fullmatch(given):
        return given
    return f"req_{uuid7()}"


def version_supported(value: str) -> bool:
    """Digest §8.19: any ``OJS-Version`` with major version 1 (``1``, ``1.0``, ``1.0.0-rc.1``)."""
    return value.strip().split(".", 1)[0].split("-", 1)[0] == "1"
