"""Authentication and scopes of the HTTP API (HB §5, OJS security §6-§7). Secure by default.

Bearer API keys (``django_ojs.apikeys``) carry one scope: ``producer`` (enqueue, read,
cancel), ``worker`` (fetch, ack, nack, heartbeat) or ``admin`` (every endpoint). Active
staff users with a Django session count as ``admin`` (CSRF is enforced for them).
``OJS_API_AUTH = "none"`` opens every endpoint. Missing or bad credentials give 401, a
scope that does not cover the endpoint 403.
"""

from __future__ import annotations

from typing import Any

from rest_framework import authentication, exceptions, permissions
from rest_framework.request import Request
from rest_framework.views import APIView

from django_ojs import apikeys
from django_ojs.conf import settings
from django_ojs.models import ApiKey

PRODUCER = ApiKey.Scope.PRODUCER.value
WORKER = ApiKey.Scope.WORKER.value
ADMIN = ApiKey.Scope.ADMIN.value
#: What each scope may call; an endpoint names the scope it needs (``required_scope``).
GRANTS = {
    PRODUCER: frozenset({PRODUCER}),
    WORKER: frozenset({WORKER}),
    ADMIN: frozenset({PRODUCER, WORKER, ADMIN}),
}


class ApiKeyUser:
    """``request.user`` for a request authenticated by an API key."""

    is_authenticated = True
    is_active = True
    is_anonymous = False
    is_staff = False
    is_superuser = False
    pk = None

    def __init__(self, key: ApiKey):
        self.key = key
        self.username = f"apikey:{key.prefix}"

    def __str__(self) -> str:
        return self.username


class BearerKeyAuthentication(authentication.BaseAuthentication):
    """``Authorization: Bearer ojs_<prefix>_<secret>``."""

    keyword = b"bearer"

    def authenticate(self, request: Request) -> tuple[ApiKeyUser, ApiKey] | None:
        parts = authentication.get_authorization_header(request).split()
        if not parts or parts[0].lower() != self.keyword:
            return None
        if len(parts) != 2:
            raise exceptions.AuthenticationFailed(
                "Malformed Authorization header: expected 'Bearer <key>'."
            )
        try:
            raw = parts[1].decode("ascii")
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed("Invalid API key.") from None
        key = apikeys.authenticate(raw)
        if key is None:
            raise exceptions.AuthenticationFailed("Invalid or revoked API key.")
        return ApiKeyUser(key), key

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="ojs"'


class StaffSessionAuthentication(authentication.SessionAuthentication):
    """A Django session (CSRF-checked for unsafe methods, as DRF does)."""


def authenticators() -> list[authentication.BaseAuthentication]:
    """The authenticators ``OJS_API_AUTH`` asks for (none when the API is open)."""
    if settings.API_AUTH == "none":
        return []
    return [BearerKeyAuthentication(), StaffSessionAuthentication()]


def granted_scopes(request: Request) -> frozenset[str]:
    """The scopes the request's credentials carry."""
    if isinstance(request.auth, ApiKey):
        return GRANTS.get(request.auth.scope, frozenset())
    user = request.user
    if user is not None and user.is_authenticated and user.is_active and user.is_staff:
        return GRANTS[ADMIN]
    return frozenset()


class ScopeDenied(exceptions.PermissionDenied):
    """403 for credentials whose scope does not cover the endpoint; names the scopes."""

    def __init__(self, detail: str, ojs_details: dict[str, Any]):
        super().__init__(detail)
        #: The error envelope's ``details`` (``api.exceptions`` reads it).
        self.ojs_details = ojs_details


class HasScope(permissions.BasePermission):
    """Allow the request when its credentials cover the view's ``required_scope``.

    Views with ``required_scope = None`` (manifest, health, unknown paths) are public.
    """

    def has_permission(self, request: Request, view: APIView) -> bool:
        scope = getattr(view, "required_scope", None)
        if scope is None or settings.API_AUTH == "none":
            return True
        # request.user is None when DRF's UNAUTHENTICATED_USER is None.
        if request.user is None or not request.user.is_authenticated:
            return False  # DRF turns this into 401 NotAuthenticated
        granted = granted_scopes(request)
        if scope in granted:
            return True
        raise ScopeDenied(
            f"These credentials may not call this endpoint: it needs the '{scope}' scope.",
            {"required_scope": scope, "granted_scopes": sorted(granted)},
        )
