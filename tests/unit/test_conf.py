"""``django_ojs.conf.settings`` remembers what it read, and forgets what Django changes."""

from __future__ import annotations

from django.test import override_settings

from django_ojs.conf import DEFAULT_MAX_ENVELOPE_BYTES, settings


def test_a_setting_read_once_follows_override_settings():
    assert settings.MAX_ENVELOPE_BYTES == DEFAULT_MAX_ENVELOPE_BYTES
    with override_settings(OJS_MAX_ENVELOPE_BYTES=1234):
        assert settings.MAX_ENVELOPE_BYTES == 1234
        with override_settings(OJS_MAX_ENVELOPE_BYTES=99):
            assert settings.MAX_ENVELOPE_BYTES == 99
        assert settings.MAX_ENVELOPE_BYTES == 1234
    assert settings.MAX_ENVELOPE_BYTES == DEFAULT_MAX_ENVELOPE_BYTES


def test_the_settings_fixture_is_followed_too(settings):  # pytest-django's fixture
    from django_ojs.conf import settings as ojs

    assert ojs.STORE_EVENTS is True
    settings.OJS_STORE_EVENTS = False
    assert ojs.STORE_EVENTS is False
    del settings.OJS_STORE_EVENTS
    assert ojs.STORE_EVENTS is True


def test_admin_ui_dir__is_a_path_or_none():
    from pathlib import Path

    assert settings.ADMIN_UI_DIR is None
    for value in ("/srv/ui", Path("/srv/ui")):
        with override_settings(OJS_ADMIN_UI_DIR=value):
            assert Path("/srv/ui") == settings.ADMIN_UI_DIR
    with override_settings(OJS_ADMIN_UI_DIR=""):
        assert settings.ADMIN_UI_DIR is None
