"""Authentication and authorization of the HTTP API (HB §5, OJS security §6-§7). Secure by default.

Every endpoint names the OJS operation it performs (security §7.2): ``enqueue``,
``dequeue``, ``cancel``, ``inspect`` or ``admin``. A credential carries one role (security
§7.3), and :data:`ROLES` says which operations each role may perform; that is the §7.5
permission matrix:

============  =======  =======  ======  =======  =====
role          enqueue  dequeue  cancel  inspect  admin
============  =======  =======  ======  =======  =====
producer      yes
worker                 yes
operator      yes               yes     yes
admin         yes      yes      yes     yes      yes
============  =======  =======  ======  =======  =====

Bearer API keys (``django_ojs.apikeys``) carry their ``scope`` as the role and may be
limited to some queues (security §7.1). Active staff users with a Django session (the
official admin UI, a browser; CSRF is enforced for them) may perform the operations
their Django permissions allow, the same ones the Django admin lets them perform
(:data:`STAFF_PERMISSIONS`); a superuser has every permission, so is ``admin``.
``OJS_API_AUTH = "none"`` opens every endpoint. Missing or bad credentials give 401; a
role without the endpoint's operation, or a queue outside the key's allowlist, gives 403
``permission_denied``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rest_framework import HTTP_HEADER_ENCODING, authentication, exceptions, permissions
from rest_framework.request import Request
from rest_framework.views import APIView

from django_ojs import apikeys, validation
from django_ojs.conf import settings
from django_ojs.exceptions import PermissionDenied
from django_ojs.models import ApiKey

PRODUCER = ApiKey.Scope.PRODUCER.value
WORKER = ApiKey.Scope.WORKER.value
OPERATOR = ApiKey.Scope.OPERATOR.value
ADMIN = ApiKey.Scope.ADMIN.value

# The operations of OJS security §7.2.
ENQUEUE = "enqueue"  # submit jobs
DEQUEUE = "dequeue"  # fetch, ack, nack, heartbeat, progress: a worker's calls
CANCEL = "cancel"  # change one job: cancel, activate, retry from the dead letter
INSPECT = "inspect"  # read jobs, events, queues and the dead letter
MANAGE = "admin"  # queues (pause, resume), deleting from the dead letter
OPERATIONS = (ENQUEUE, DEQUEUE, CANCEL, INSPECT, MANAGE)

#: What each role may do (OJS security §7.3 and the §7.5 matrix).
ROLES: dict[str, frozenset[str]] = {
    PRODUCER: frozenset({ENQUEUE}),
    WORKER: frozenset({DEQUEUE}),
    OPERATOR: frozenset({ENQUEUE, CANCEL, INSPECT}),
    ADMIN: frozenset(OPERATIONS),
}


#: The Django permissions a staff session needs for each operation: what the Django admin
#: asks of the same user for the same work (its job, dead letter, queue and worker pages).
#: ``admin`` (pausing queues, deleting jobs, directing workers, the admin API's bulk and
#: system operations) needs all three of the admin's operator permissions.
STAFF_PERMISSIONS: dict[str, tuple[str, ...]] = {
    INSPECT: ("ojs.view_job",),
    ENQUEUE: ("ojs.add_job",),
    CANCEL: ("ojs.cancel_job",),
    DEQUEUE: ("ojs.change_job",),
    MANAGE: ("ojs.pause_queue", "ojs.purge_job", "ojs.direct_worker"),
}


def roles_for(operation: str) -> list[str]:
    """The roles allowed to perform ``operation``, in :data:`ROLES` order."""
    return [role for role, allowed in ROLES.items() if operation in allowed]


@dataclass(frozen=True)
class Principal:
    """Who is calling (OJS security §3): a name, a role and the queues it may use."""

    name: str
    role: str | None
    #: Queue names or ``prefix*`` patterns; ``None``: every queue.
    queues: tuple[str, ...] | None = None
    key: ApiKey | None = None
    #: What a staff session may do (from its Django permissions); ``None``: its role's.
    allowed: frozenset[str] | None = None
    #: Tenants whose jobs it may use (multi-tenancy §5); ``None``: every tenant.
    tenants: tuple[str, ...] | None = None

    @property
    def operations(self) -> frozenset[str]:
        if self.allowed is not None:
            return self.allowed
        if self.role is None:
            return frozenset(OPERATIONS)  # OJS_API_AUTH = "none"
        return ROLES.get(self.role, frozenset())

    def may(self, operation: str) -> bool:
        return operation in self.operations

    def may_use(self, queue: str) -> bool:
        return self.queues is None or validation.name_allowed(queue, self.queues)

    def require_tenant(self, tenant: str, operation: str) -> None:
        """Raise 403 unless this principal may use jobs of ``tenant`` (``""``: none)."""
        if self.tenants is None or tenant in self.tenants:
            return
        named = f"tenant '{tenant}'" if tenant else "jobs without a tenant"
        raise PermissionDenied(
            f"Principal '{self.name}' does not have '{operation}' permission on {named}.",
            details={
                "principal": self.name,
                "operation": operation,
                "tenant_id": tenant,
                "allowed_tenants": list(self.tenants),
            },
        )

    def require_every_tenant(self) -> None:
        """Raise 403 for a principal limited to some tenants: the endpoint shows every
        tenant's jobs, events or figures (multi-tenancy §5)."""
        if self.tenants is not None:
            raise PermissionDenied(
                f"Principal '{self.name}' is limited to some tenants; this endpoint spans "
                "every tenant.",
                details={"principal": self.name, "allowed_tenants": list(self.tenants)},
            )

    def require_queue(self, queue: str, operation: str) -> None:
        """Raise 403 unless this principal may use ``queue`` (security §7.1, §15.2)."""
        if not self.may_use(queue):
            raise PermissionDenied(
                f"Principal '{self.name}' does not have '{operation}' permission on "
                f"queue '{queue}'.",
                details={
                    "principal": self.name,
                    "operation": operation,
                    "queue": queue,
                    "allowed_queues": list(self.queues or ()),
                },
            )


OPEN = Principal("anonymous", None)


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


def _authorization_header(request: Request) -> bytes:
    """DRF's ``get_authorization_header``, from ``META``: ``request.headers`` would copy
    every header of the request (DRF reads the one it needs from there)."""
    auth = request.META.get("HTTP_AUTHORIZATION", b"")
    if isinstance(auth, str):
        auth = auth.encode(HTTP_HEADER_ENCODING)
    return bytes(auth)


class BearerKeyAuthentication(authentication.BaseAuthentication):
    """``Authorization: Bearer ojs_<prefix>_<secret>``."""

    keyword = b"bearer"

    def authenticate(self, request: Request) -> tuple[ApiKeyUser, ApiKey] | None:
        parts = _authorization_header(request).split()
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


def principal(request: Request) -> Principal | None:
    """Who the request's credentials name; ``None`` when they grant nothing."""
    if settings.API_AUTH == "none":
        return OPEN
    if isinstance(request.auth, ApiKey):
        key = request.auth
        return Principal(
            key.principal, key.scope, tuple(key.queues) or None, key,
            tenants=tuple(key.tenants or ()) or None,
        )  # fmt: skip
    user = request.user
    if user is not None and user.is_authenticated and user.is_active and user.is_staff:
        return staff_principal(user)
    return None


def staff_principal(user: Any) -> Principal:
    """A staff user's rights over HTTP: the operations their Django permissions allow
    (:data:`STAFF_PERMISSIONS`), reported as the §7.5 role they add up to."""
    perms = user.get_all_permissions()
    allowed = frozenset(
        operation
        for operation, needed in STAFF_PERMISSIONS.items()
        if user.is_superuser or all(p in perms for p in needed)
    )
    role = next((r for r in (ADMIN, OPERATOR) if ROLES[r] <= allowed), None)
    return Principal(f"user:{user.get_username()}", role or "staff", allowed=allowed)


def operation_of(view: APIView, method: str) -> str | None:
    """The operation ``view`` performs for ``method`` (its ``operation``); ``None``: public."""
    operation = getattr(view, "operation", None)
    if isinstance(operation, Mapping):
        # A method the view does not list is answered 405 by the view; guard it as admin.
        return str(operation.get(method, MANAGE))
    return None if operation is None else str(operation)


class ScopeDenied(exceptions.PermissionDenied):
    """403 for credentials whose role does not cover the endpoint; names the roles."""

    def __init__(self, detail: str, ojs_details: dict[str, Any]):
        super().__init__(detail)
        #: The error envelope's ``details`` (``api.exceptions`` reads it).
        self.ojs_details = ojs_details


class HasScope(permissions.BasePermission):
    """Allow the request when its role may perform the view's operation (security §7.5).

    Views with ``operation = None`` (manifest, health, unknown paths) are public.
    """

    def has_permission(self, request: Request, view: APIView) -> bool:
        operation = operation_of(view, request.method or "GET")
        if operation is None or settings.API_AUTH == "none":
            return True
        # request.user is None when DRF's UNAUTHENTICATED_USER is None.
        if request.user is None or not request.user.is_authenticated:
            return False  # DRF turns this into 401 NotAuthenticated
        who = principal(request)
        if who is not None and who.may(operation):
            return True
        role = who.role if who is not None else None
        raise ScopeDenied(
            f"These credentials may not call this endpoint: it performs '{operation}', "
            f"which needs the {' or '.join(repr(r) for r in roles_for(operation))} scope.",
            {
                "operation": operation,
                "required_scopes": roles_for(operation),
                "granted_scopes": [role] if role else [],
            },
        )
