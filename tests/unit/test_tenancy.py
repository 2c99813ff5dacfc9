"""The tenant id's form, the X-OJS-Tenant merge (multi-tenancy §5) and the settings check."""

from __future__ import annotations

import pytest

from django_ojs import checks, tenancy
from django_ojs.exceptions import ValidationError


@pytest.mark.parametrize("good", ["a", "acme-corp", "org:42", "A.b_c-d:e", "9" * 255])
def test_tenant_ids_of_the_spec_pattern_pass(good):
    assert tenancy.validate_tenant(good) == good


@pytest.mark.parametrize("bad", ["", "_default", "-a", ".a", "a b", "a/b", "é", "9" * 256, 7, None])
def test_other_tenant_ids_are_refused(bad):
    with pytest.raises(ValidationError):
        tenancy.validate_tenant(bad)


def test_the_header_fills_a_missing_tenant_and_refuses_another():
    assert tenancy.with_tenant({"type": "a"}, "acme") == {
        "type": "a",
        "meta": {"tenant_id": "acme"},
    }
    same = {"type": "a", "meta": {"tenant_id": "acme"}}
    assert tenancy.with_tenant(same, "acme") is same
    with pytest.raises(tenancy.TenantConflict):
        tenancy.with_tenant({"meta": {"tenant_id": "beta"}}, "acme")
    with pytest.raises(tenancy.TenantConflict):  # options.metadata is merged over meta
        tenancy.with_tenant({"options": {"metadata": {"tenant_id": "beta"}}}, "acme")
    assert tenancy.with_tenant({"type": "a"}, None) == {"type": "a"}
    assert tenancy.with_tenant(["not", "an", "object"], "acme") == ["not", "an", "object"]


def test_the_current_tenant_is_scoped_and_carried_only_where_none_is_named():
    assert tenancy.current() is None
    with tenancy.use("acme"):
        assert tenancy.carried({}) == {"tenant_id": "acme"}
        assert tenancy.carried({"tenant_id": "beta"}) is None
        with tenancy.use(None):
            assert tenancy.current() is None
    assert tenancy.current() is None
    with pytest.raises(ValidationError), tenancy.use("not valid"):
        pass


@pytest.mark.parametrize("name", ["OJS_TENANT_REQUIRED", "OJS_TENANT_FAIRNESS"])
def test_check__tenant_switches_must_be_booleans(settings, name):
    setattr(settings, name, "False")
    assert [m.id for m in checks.check_settings()] == ["ojs.E018"]
    setattr(settings, name, False)
    assert checks.check_settings() == []
