"""Minimal settings for the django-ojs test suite.

``DATABASE_URL`` chooses the database (default: an SQLite *file*, so that thread tests
share one database across connections). The test database name follows the URL, so
parallel runs with different URLs do not collide.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import environ

env = environ.Env()

SECRET_KEY = "django-ojs-tests"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_ojs",
    "tests.taskapp",
]
# Django's task framework on OJS (django_ojs.tasks); tests/taskapp holds the tasks.
TASKS = {
    "default": {
        "BACKEND": "django_ojs.tasks.OJSBackend",
        "QUEUES": ["default", "tasks"],
        "OPTIONS": {"timeout": 60},
    }
}
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "tests.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# Django's default hasher (PBKDF2, a million iterations) takes 0.3 s of CPU per password on
# the project's machine, and every admin test creates a user with one: a third of the
# suite's time. Tests check permissions, not password strength (Django's testing docs
# recommend this).
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

_default_sqlite = Path(tempfile.gettempdir()) / f"django-ojs-tests-{os.getuid()}.sqlite3"
DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{_default_sqlite}")}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    name = Path(DATABASES["default"]["NAME"])
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
        "init_command": "PRAGMA journal_mode=WAL;",
    }
    DATABASES["default"]["TEST"] = {"NAME": str(name.with_name(f"test_{name.name}"))}

# A second alias on the same test database (Django's test mirror), for the tests of
# OJS_READ_DATABASE: they see which alias each page reads from. Unused otherwise.
DATABASES["replica"] = {**DATABASES["default"], "TEST": {"MIRROR": "default"}}
