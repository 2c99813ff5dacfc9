"""Settings for the django-ojs example project (``make demo``).

``DATABASE_URL`` picks the database (django-environ); the default is an SQLite file next
to this project, set up for a web process and a worker writing at once.
"""

from __future__ import annotations

from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent
env = environ.Env()

SECRET_KEY = env.str("DJANGO_SECRET_KEY", default="django-ojs-example-not-secret")
DEBUG = env.bool("DJANGO_DEBUG", default=True)
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]"])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_ojs",
    "example_project",
]

# Django's task framework runs on OJS: @task functions (example_project/tasks.py) are
# enqueued as OJS jobs and run by manage.py ojs_worker.
TASKS = {
    "default": {
        "BACKEND": "django_ojs.tasks.OJSBackend",
        "QUEUES": ["default", "email"],
    }
}

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "example_project.urls"
WSGI_APPLICATION = "example_project.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
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

DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}")}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # A worker and the web process write at once: take the write lock up front
    # (IMMEDIATE), wait for it instead of failing, and let readers run beside the writer.
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# The HTTP API needs a bearer key (`manage.py ojs_apikey create NAME --scope ...`) unless
# OJS_API_AUTH=none opens it (local development and the conformance run only).
OJS_API_AUTH = env.str("OJS_API_AUTH", default="api_key")
OJS_RESPONSE_CONTENT_TYPE = env.str(
    "OJS_RESPONSE_CONTENT_TYPE", default="application/openjobspec+json"
)
# A built official OJS admin UI to serve at /ojs/admin/ (docs: "Use the official admin UI").
OJS_ADMIN_UI_DIR = env.str("OJS_ADMIN_UI_DIR", default=None)
# Seconds between an execution timeout and the server failing the attempt (timeouts §5.4).
OJS_GRACE_PERIOD = env.float("OJS_GRACE_PERIOD", default=30.0)

USE_TZ = True
TIME_ZONE = "UTC"
LANGUAGE_CODE = "en-us"
STATIC_URL = "static/"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django_ojs": {"handlers": ["console"], "level": env.str("OJS_LOG_LEVEL", "INFO")}},
}
