"""The base view of every OJS endpoint: wire rules, authentication, headers, the body.

Views subclass :class:`OJSView`, set ``operation`` (the OJS security §7.2 operation each
method performs, see ``api.permissions``) and implement ``get``/``post``/``delete`` as
parse → authorize the queue → one core call → render.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Q
from django.urls import NoReverseMatch, get_resolver, get_script_prefix, get_urlconf, reverse
from rest_framework.response import Response
from rest_framework.views import APIView

from django_ojs import jobquery, tracing
from django_ojs.actors import Actor
from django_ojs.api import exceptions, permissions, throttling, wire
from django_ojs.api.serializers import require_object
from django_ojs.conf import settings
from django_ojs.exceptions import (
    InvalidRequest,
    JobNotFound,
    NotFound,
    Unsupported,
    ValidationError,
)
from django_ojs.models import Job
from django_ojs.tenancy import TenantConflict, validate_tenant, with_tenant

BODY_METHODS = ("POST", "PUT", "PATCH")


class OJSView(APIView):
    """Common behaviour of the OJS HTTP binding (HB §3-§6, §16, §19)."""

    #: The operation performed (``permissions.ENQUEUE``...), or one per HTTP method
    #: (``{"GET": INSPECT, "DELETE": CANCEL}``); ``None`` = public.
    operation: str | Mapping[str, str] | None = None
    #: Whether a POST must carry a JSON body (an empty one is ``invalid_payload``).
    body_required = False

    parser_classes = [wire.OJSJSONParser, wire.JSONParser]
    renderer_classes = [wire.OJSRenderer]
    content_negotiation_class = wire.OJSContentNegotiation
    permission_classes = [permissions.HasScope]
    throttle_classes: list[Any] = [throttling.CallerRateThrottle]
    metadata_class = None
    versioning_class = None

    @property
    def allowed_methods(self) -> list[str]:
        # No OPTIONS metadata (metadata_class is None): OPTIONS is a 405 like any other.
        return [m for m in super().allowed_methods if m != "OPTIONS"]

    def get_authenticators(self) -> list[Any]:
        return permissions.authenticators()

    def get_throttles(self) -> list[Any]:
        # Without OJS_API_RATE_LIMIT a throttle allows every request and adds no header.
        if settings.API_RATE_LIMIT is None:
            return []
        return super().get_throttles()

    def get_exception_handler(self) -> Any:
        return exceptions.exception_handler

    def dispatch(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        # A caller in a trace (W3C traceparent) has its trace carried into the jobs it
        # enqueues (TraceContextMiddleware); without the header nothing is added. Headers
        # are read from META: request.headers would copy them all for each request.
        if "HTTP_TRACEPARENT" in request.META and tracing.current() is None:
            with tracing.use(tracing.from_headers(request.headers.get)):
                return super().dispatch(request, *args, **kwargs)
        return super().dispatch(request, *args, **kwargs)

    def initialize_request(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        # Before anything can fail, so every error body carries the request id.
        request.ojs_request_id = wire.request_id(request)
        return super().initialize_request(request, *args, **kwargs)

    def initial(self, request: Any, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        version = request.META.get("HTTP_OJS_VERSION")
        if version and not wire.version_supported(version):
            raise Unsupported(
                f"OJS-Version {version!r} is not supported; this server speaks {wire.OJS_VERSION}.",
                details={"requested": version, "supported": [wire.OJS_VERSION]},
            )
        length = request.META.get("CONTENT_LENGTH")
        limit = settings.MAX_REQUEST_BYTES
        if length and length.isdigit() and int(length) > limit:
            raise wire.too_large(int(length), limit)

    def finalize_response(self, request: Any, response: Any, *args: Any, **kwargs: Any) -> Any:
        response = super().finalize_response(request, response, *args, **kwargs)
        response["OJS-Version"] = wire.OJS_VERSION
        response[wire.REQUEST_ID_HEADER] = getattr(request, "ojs_request_id", None) or getattr(
            getattr(request, "_request", None), "ojs_request_id", ""
        )
        response["Cache-Control"] = "no-store"
        for name, value in getattr(request, "ojs_rate_limit", {}).items():
            response[name] = value  # rate-limiting §10.4, when OJS_API_RATE_LIMIT is set
        return response

    # ----------------------------------------------------------------- helpers

    #: Methods whose body is read (the admin API's purges add DELETE).
    body_methods: tuple[str, ...] = BODY_METHODS

    def body(self, request: Any) -> dict[str, Any]:
        """The JSON object sent with a POST; ``{}`` for an allowed empty body."""
        if request.method not in self.body_methods:
            return {}
        if request.stream is None:  # no body at all (Content-Length 0 or absent)
            if self.body_required:
                raise ValidationError("The request body is empty: send a JSON object.", field="")
            return {}
        return require_object(request.data)

    def actor(self, request: Any) -> Actor:
        """Who is calling, for events (``cancelled_by``...) and the audit trail."""
        return Actor(
            self.principal(request).name,
            source="http",
            source_ip=str(request.META.get("REMOTE_ADDR") or ""),
            request_id=str(getattr(request, "ojs_request_id", "") or ""),
        )

    # ------------------------------------------------------- queue access (security §7.1)

    def principal(self, request: Any) -> permissions.Principal:
        """The caller (``OPEN`` when the view is public or the API unauthenticated).

        Worked out once per request: a batch asks for each of its jobs' queues."""
        who: permissions.Principal | None = getattr(request, "_ojs_principal", None)
        if who is None:
            who = permissions.principal(request) or permissions.OPEN
            request._ojs_principal = who
        return who

    def require_queue(self, request: Any, queue: str, operation: str) -> None:
        """403 unless the caller's key may use ``queue``."""
        self.principal(request).require_queue(queue, operation)

    def require_job_queue(self, request: Any, job_id: Any, operation: str) -> None:
        """403 unless the caller's key may use the queue of job ``job_id``; 404 when the
        job is of a tenant outside the caller's (:meth:`tenant_scope`), as if it did
        not exist.

        An unknown or malformed id passes: the core call then answers 404 as usual.
        """
        who = self.principal(request)
        scope = self.tenant_scope(request)
        if who.queues is None and scope is None:
            return
        try:
            found = (
                Job.objects.using(settings.DATABASE)
                .filter(pk=job_id)
                .values_list("queue", "tenant")
                .first()
            )
        except (ValueError, TypeError, DjangoValidationError):
            return
        if found is None:
            return
        queue, tenant = found
        if scope is not None and tenant not in scope:
            raise JobNotFound(str(job_id))
        who.require_queue(queue, operation)

    # ------------------------------------------------------ tenants (multi-tenancy §5)

    def request_tenant(self, request: Any) -> str | None:
        """The ``X-OJS-Tenant`` header's tenant (400 when malformed, 403 when the caller's
        key may not use it), or ``None`` without the header."""
        raw = request.META.get("HTTP_X_OJS_TENANT")
        if raw is None:
            return None
        tenant = validate_tenant(raw.strip(), field="X-OJS-Tenant")
        self.principal(request).require_tenant(tenant, "use")
        return tenant

    def tenant_scope(self, request: Any) -> tuple[str, ...] | None:
        """The tenants whose jobs this request may see and change: the header's, else the
        key's allowlist; ``None``: every job."""
        if not hasattr(request, "_ojs_tenants"):
            header = self.request_tenant(request)
            request._ojs_tenants = (header,) if header else self.principal(request).tenants
        scope: tuple[str, ...] | None = request._ojs_tenants
        return scope

    def tenant_filter(self, request: Any) -> Q | None:
        """A filter keeping the jobs of the caller's tenants; ``None``: all of them."""
        scope = self.tenant_scope(request)
        return None if scope is None else Q(tenant__in=list(scope))

    def enqueue_tenant(self, request: Any) -> str | None:
        """The tenant of the jobs this request enqueues without one: the header's, else
        the key's when it has only one (multi-tenancy §5.2, API key mapping)."""
        tenant = self.request_tenant(request)
        if tenant is None:
            tenants = self.principal(request).tenants
            tenant = tenants[0] if tenants is not None and len(tenants) == 1 else None
        return tenant

    def enqueue_body(self, request: Any, body: Any) -> Any:
        """An enqueue request's job with the request's tenant (:meth:`enqueue_tenant`) as
        its ``meta.tenant_id``: 400 when the job names another than the header (§5.3);
        one naming another than its key's is left for :meth:`require_job_tenant` (403)."""
        if self.request_tenant(request) is not None:
            return with_tenant(body, self.enqueue_tenant(request))
        try:
            return with_tenant(body, self.enqueue_tenant(request))
        except TenantConflict:
            return body

    def require_job_tenant(self, request: Any, tenant: str, operation: str) -> None:
        """403 unless the caller may enqueue a job of ``tenant`` (its key's allowlist)."""
        self.principal(request).require_tenant(tenant, operation)

    def queue_filter(self, request: Any, field: str = "queue") -> Q | None:
        """A filter keeping the rows of queues the caller may use; ``None``: all of them."""
        queues = self.principal(request).queues
        if queues is None:
            return None
        q = Q(pk__in=[])
        for pattern in queues:
            if pattern.endswith("*"):
                q |= Q(**{f"{field}__startswith": pattern[:-1]})
            else:
                q |= Q(**{field: pattern})
        return q

    def location(self, name: str, *args: Any) -> str:
        namespace = getattr(self.request.resolver_match, "namespace", None) or "ojs"
        return _reverse(f"{namespace}:{name}", args)


def require_confirm(body: dict[str, Any]) -> None:
    """400 unless ``body`` says ``"confirm": true`` (the safety interlock of bulk actions)."""
    if body.get("confirm") is not True:
        raise InvalidRequest(
            'This operation needs "confirm": true (admin API safety interlock).',
            details={"field": "confirm"},
        )


def refuse_unknown(body: dict[str, Any], known: set[str]) -> None:
    """Refuse unknown body fields: a misspelt filter must not widen a destructive action."""
    unknown = sorted(set(body) - known)
    if unknown:
        raise InvalidRequest(
            f"Unknown field '{unknown[0]}' (known: {', '.join(sorted(known))})",
            details={"field": unknown[0]},
        )


def bulk_filter(body: dict[str, Any]) -> jobquery.JobFilter:
    """The job filter of a bulk action's body ``{"filter": {...}, "confirm": true}``: the
    confirmation required, no other field, the filter an object (absent: every job)."""
    require_confirm(body)
    refuse_unknown(body, {"confirm", "filter"})
    raw = body.get("filter") or {}
    if not isinstance(raw, dict):
        raise InvalidRequest("filter must be an object", details={"field": "filter"})
    return jobquery.JobFilter.parse(raw)


class NotFoundView(OJSView):
    """Any path under the mount point that is no OJS endpoint: 404 in the OJS envelope."""

    def _not_found(self, request: Any, *args: Any, **kwargs: Any) -> Response:
        raise NotFound(
            f"No OJS endpoint at {request.path} (paths have no trailing slash).",
            details={"path": request.path, "method": request.method},
        )

    get = post = put = patch = delete = head = options = _not_found


#: What ``reverse()`` made of a view name with a placeholder for its one argument: the
#: text before and after it (``None``: no such template), per URLconf and script prefix.
_templates: dict[tuple[Any, str, str, int], tuple[str, str] | None] = {}
_PLACEHOLDER = "ojs-location-arg"
#: Arguments ``reverse()`` puts in a ``<str:...>`` route (as every OJS route takes its
#: argument) unchanged: URL-unreserved characters.
_PLAIN_ARG = re.compile(r"[A-Za-z0-9._~-]+")  # used with fullmatch


def _reverse(viewname: str, args: Sequence[Any]) -> str:
    """``reverse(viewname, args=args)``, from a template for no or one plain argument.

    ``reverse()`` searches the URLconf on each call: 15 µs, 5 % of an enqueue request's
    CPU (its ``Location``). The template is keyed by the resolver, which Django replaces
    when the URLconf changes (``clear_url_caches``), and the request's script prefix.
    """
    if len(args) > 1 or (args and not _PLAIN_ARG.fullmatch(str(args[0]))):
        return reverse(viewname, args=args)
    key = (get_resolver(get_urlconf()), get_script_prefix(), viewname, len(args))
    try:
        template = _templates[key]
    except KeyError:
        template = None
        try:
            url = reverse(viewname, args=[_PLACEHOLDER] if args else [])
        except NoReverseMatch:
            url = ""
        parts = url.split(_PLACEHOLDER) if args else [url, ""]
        if len(parts) == 2 and parts[0]:
            template = (parts[0], parts[1])
        if len(_templates) >= 256:  # script prefixes come from the server, not clients
            _templates.clear()
        _templates[key] = template
    if template is None:
        return reverse(viewname, args=args)
    return f"{template[0]}{args[0]}{template[1]}" if args else template[0]
