"""Install the built wheel where a user would, and use it: ``make dist`` runs this.

    python tests/dist_smoke.py dist/django_ojs-<version>-py3-none-any.whl

Makes a clean virtualenv in a temporary directory, installs the wheel there (its
dependencies come from the package index, none of this repository is on the path), writes
a small Django project that lists ``django_ojs`` in ``INSTALLED_APPS`` with one handler,
and then, as its user would:

1. ``manage.py migrate`` and ``manage.py check`` (SQLite, the embedded default);
2. enqueues a job from ``manage.py shell``;
3. starts a real ``manage.py ojs_worker``, waits until the job is completed (however long
   the machine takes: the worker's readiness is the job's state, not a clock), sends
   SIGTERM and expects a clean exit;
4. logs a superuser into the Django admin with Django's test client and expects the jobs
   page, the OJS dashboard and ``/ojs/manifest`` to answer 200, with the admin's static
   files and templates found in the wheel.

Standard library only. Exits non-zero, with the failing step's output, on any failure.
Not collected by pytest (its name has no ``test_`` prefix): it builds a virtualenv.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

SETTINGS = """
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = "dist-smoke-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["testserver", "127.0.0.1", "localhost"]
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_ojs",
    "shop",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "smoke.urls"
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
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": BASE_DIR / "db.sqlite3",
        "OPTIONS": {
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
            "init_command": "PRAGMA journal_mode=WAL;",
        },
    }
}
USE_TZ = True
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
"""

URLS = """
from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("ojs/", include("django_ojs.urls")),
]
"""

JOBS = """
import django_ojs


@django_ojs.handler("smoke.add")
def add(a, b):
    return {"sum": a + b}
"""

MANAGE = """
import os
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "smoke.settings")
from django.core.management import execute_from_command_line

execute_from_command_line(sys.argv)
"""

ENQUEUE = """
import django_ojs
print(django_ojs.enqueue("smoke.add", [2, 3]).id)
"""

# Waits in one process for the job to finish: readiness, not speed. The deadline only
# stops a hung run (ten minutes on any machine).
WAIT = """
import json, time
from django_ojs.models import Job
deadline = time.monotonic() + 600
while True:
    job = Job.objects.get(pk="{job_id}")
    if job.state in ("completed", "discarded", "cancelled") or time.monotonic() > deadline:
        break
    time.sleep(0.2)
print(job.state, json.dumps(job.result))
"""

ADMIN = """
import json
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

import django_ojs

User.objects.create_superuser("admin", "admin@example.com", "admin")
client = Client()
client.force_login(User.objects.get(username="admin"))
answers = {
    path: client.get(path).status_code
    for path in (
        reverse("admin:index"),
        reverse("admin:ojs_job_changelist"),
        reverse("admin:ojs_dashboard_changelist"),
        "/ojs/manifest",
    )
}
print(json.dumps({"answers": answers, "module": django_ojs.__file__}))
"""


def main() -> None:
    wheels = [Path(arg).resolve() for arg in sys.argv[1:]]
    if len(wheels) != 1 or wheels[0].suffix != ".whl" or not wheels[0].is_file():
        sys.exit("usage: python tests/dist_smoke.py dist/django_ojs-<version>-py3-none-any.whl")
    with tempfile.TemporaryDirectory(prefix="ojs-dist-smoke-") as tmp:
        smoke(wheels[0], Path(tmp))
    print("dist smoke test passed")


def smoke(wheel: Path, root: Path) -> None:
    venv = root / "venv"
    python = str(venv / "bin" / "python")
    step("virtualenv", [sys.executable, "-m", "venv", str(venv)], root)
    step("install the wheel", [python, "-m", "pip", "install", "--quiet", str(wheel)], root)
    project = root / "project"
    for name, text in {
        "manage.py": MANAGE,
        "smoke/__init__.py": "",
        "smoke/settings.py": SETTINGS,
        "smoke/urls.py": URLS,
        "shop/__init__.py": "",
        "shop/jobs.py": JOBS,
    }.items():
        path = project / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    manage = [python, "manage.py"]
    step("migrate", [*manage, "migrate", "--no-input", "-v", "0"], project)
    step("check", [*manage, "check", "--fail-level", "WARNING"], project)
    job_id = step("enqueue", [*manage, "shell", "-v", "0", "-c", ENQUEUE], project)

    log = root / "worker.log"
    with log.open("w") as out:  # a file, not a pipe nobody reads while it runs
        worker = subprocess.Popen(
            [*manage, "ojs_worker", "--concurrency", "2", "--poll-interval", "0.2"],
            cwd=project,
            env=clean_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        state = step(
            "wait for the job",
            [*manage, "shell", "-v", "0", "-c", WAIT.format(job_id=job_id)],
            project,
        )
        if not state.startswith("completed ") or json.loads(state.split(" ", 1)[1]) != {"sum": 5}:
            worker.kill()
            worker.wait()
            fail("worker", f"the job is {state!r}", log.read_text())
        worker.send_signal(signal.SIGTERM)
        if worker.wait(timeout=600) != 0:
            fail("worker", f"exit code {worker.returncode} after SIGTERM", log.read_text())
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()

    report = json.loads(step("admin", [*manage, "shell", "-v", "0", "-c", ADMIN], project))
    if not report["module"].startswith(str(venv)):
        fail("admin", f"django_ojs was imported from {report['module']}, not the wheel", "")
    if any(status != 200 for status in report["answers"].values()):
        fail("admin", f"pages answered {report['answers']}", "")
    print(f"installed {wheel.name}: job {job_id} completed, pages {report['answers']}")


def clean_env() -> dict[str, str]:
    """The environment without anything that would put this repository on the path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "DJANGO", "OJS_"))}
    env.pop("DATABASE_URL", None)
    env.pop("VIRTUAL_ENV", None)
    return env


def step(name: str, command: list[str], cwd: Path) -> str:
    """Run ``command``; its last line of output (``shell`` may print a banner first)."""
    done = subprocess.run(command, cwd=cwd, env=clean_env(), capture_output=True, text=True)
    if done.returncode != 0:
        fail(name, f"{' '.join(command)} exited {done.returncode}", done.stdout + done.stderr)
    lines = done.stdout.strip().splitlines()
    return lines[-1] if lines else ""


def fail(name: str, what: str, output: str) -> None:
    sys.exit(f"dist smoke test failed at '{name}': {what}\n{output}")


if __name__ == "__main__":
    main()
