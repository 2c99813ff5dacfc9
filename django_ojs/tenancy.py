"""Tenants (OJS multi-tenancy §5): the tenant id's form, and how a request's tenant
(``X-OJS-Tenant``, an API key's allowlist) combines with a job's ``meta.tenant_id``.

Pure: no database access. Used by the one validator (``validation.validate_meta``), the
HTTP views and ``lifecycle``.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
from collections.abc import Iterator
from typing import Any

from django_ojs.exceptions import ValidationError

#: Multi-tenancy §5.2: a tenant id; at most the 255 characters of ``Job.tenant``.
TENANT_PATTERN = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9._:-]*")
TENANT_MAX_LENGTH = 255


def validate_tenant(value: Any, *, field: str = "meta.tenant_id") -> str:
    """A tenant id (multi-tenancy §5.2): ``^[a-zA-Z0-9][a-zA-Z0-9._:-]*$``, 1-255 chars."""
    if (
        not isinstance(value, str)
        or len(value) > TENANT_MAX_LENGTH
        or not TENANT_PATTERN.fullmatch(value)
    ):
        raise ValidationError(
            f"{field} must be a string of 1 to {TENANT_MAX_LENGTH} characters matching "
            "^[a-zA-Z0-9][a-zA-Z0-9._:-]*$",
            field=field,
        )
    return value


def validate_tenants(value: Any, *, field: str = "tenants") -> list[str]:
    """A list of tenant ids (an API key's allowlist); ``None`` is ``[]`` (every tenant)."""
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        raise ValidationError(f"{field} must be an array of tenant ids", field=field)
    return list(dict.fromkeys(validate_tenant(t, field=field) for t in value))


def tenant_of(meta: Any) -> str:
    """The tenant a job's (validated) meta names; ``""`` for none."""
    if meta and isinstance(meta, dict):
        tenant = meta.get("tenant_id")
        if isinstance(tenant, str):
            return tenant
    return ""


class TenantConflict(ValidationError):
    """``X-OJS-Tenant`` names another tenant than the job's ``meta.tenant_id`` (§5.3: 400)."""

    def __init__(self, header: str, meta: str):
        super().__init__(
            f"The X-OJS-Tenant header ({header!r}) and meta.tenant_id ({meta!r}) disagree",
            field="meta.tenant_id",
            details={"header": header, "tenant_id": meta},
        )


def with_tenant(body: Any, tenant: str | None) -> Any:
    """An enqueue request's body with ``tenant`` (the request's) as its ``meta.tenant_id``.

    Multi-tenancy §5.3: injected when the body names none; the same one is fine; another
    one is refused (:class:`TenantConflict`). A body that is not an object, or whose
    meta is not one, is left for the validator to refuse.
    """
    if tenant is None or not isinstance(body, dict):
        return body
    meta = body.get("meta")
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        return body
    options = body.get("options")
    extra = options.get("metadata") if isinstance(options, dict) else None
    named = meta.get("tenant_id")
    if isinstance(extra, dict) and "tenant_id" in extra:
        named = extra["tenant_id"]  # options.metadata is merged over meta
    if named is None:
        return {**body, "meta": {**meta, "tenant_id": tenant}}
    if named != tenant:
        raise TenantConflict(tenant, str(named))
    return body


#: The tenant of the code running now: set by :func:`use` (``django_ojs.tenant``) and,
#: while a handler runs, to its job's tenant; jobs pushed meanwhile without a tenant of
#: their own get it (``lifecycle.push``).
_current: contextvars.ContextVar[str | None] = contextvars.ContextVar("ojs_tenant", default=None)


def current() -> str | None:
    """The tenant of the code running now (:func:`use`), or ``None``."""
    return _current.get()


@contextlib.contextmanager
def use(tenant: str | None) -> Iterator[None]:
    """Run the block as ``tenant``: the jobs it enqueues without a ``meta.tenant_id`` get
    this one. ``None`` or ``""``: no tenant (the block's pushes keep their own)."""
    token = _current.set(validate_tenant(tenant, field="tenant") if tenant else None)
    try:
        yield
    finally:
        _current.reset(token)


#: ``django_ojs.tenant("acme")``: :func:`use`, under the name the package exports.
tenant = use


def carried(meta: dict[str, Any]) -> dict[str, Any] | None:
    """``meta`` with the current tenant (:func:`current`) when it names none; ``None``
    when nothing is to change."""
    now = _current.get()
    if now is None or "tenant_id" in meta:
        return None
    return {**meta, "tenant_id": now}
