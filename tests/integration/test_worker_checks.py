"""``ojs_worker`` runs django-ojs's own system checks when it starts, and only those.

Every app's checks (URL confs and their views, templates, the admin) are
``manage.py check``'s job: they import the whole site, which a worker does not use.
"""

from __future__ import annotations

import pytest
from django.core import checks
from django.core.management import CommandError, call_command
from django.core.management.base import SystemCheckError

from django_ojs.checks import TAG

pytestmark = pytest.mark.django_db


@pytest.fixture
def failing_site_check():
    """A check of another app (untagged) that always fails, registered for one test."""

    def site_check(app_configs=None, **kwargs):  # type: ignore[no-untyped-def]
        return [checks.Error("the site is misconfigured", id="site.E001")]

    checks.register(site_check)
    try:
        yield
    finally:
        checks.registry.registry.registered_checks.discard(site_check)


def test_a_bad_ojs_setting_stops_the_worker_before_it_starts(settings):
    settings.OJS_VISIBILITY_TIMEOUT = -1
    with pytest.raises(SystemCheckError, match=r"ojs\.E004"):
        call_command("ojs_worker", "--concurrency", "0", skip_checks=False)


# A full check looks at every database (Django 6 asks each one what its fields need),
# the test settings' replica alias included.
@pytest.mark.django_db(transaction=True, databases=["default", "replica"])
def test_other_apps_checks_are_left_to_manage_py_check(failing_site_check):
    # The worker gets past its checks to its own argument check: site.E001 did not run.
    with pytest.raises(CommandError, match="--concurrency must be at least 1"):
        call_command("ojs_worker", "--concurrency", "0", skip_checks=False)
    # ...while a full check still reports it, and the ojs tag selects django-ojs's own.
    assert "site.E001" in {m.id for m in checks.run_checks()}
    ours = {m.id for m in checks.run_checks(tags=[TAG])}
    assert "site.E001" not in ours
