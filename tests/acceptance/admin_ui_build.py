"""Build the official OJS admin UI (openjobspec/ojs-admin-ui) for the browser test, cached.

The source is ``$OJS_ADMIN_UI_SOURCE`` (default ``../shared/ojs-admin-ui`` beside the
repository). It is copied to ``$OJS_ADMIN_UI_CACHE`` (default
``~/.cache/django-ojs/admin-ui``), never built in place: ``npm ci`` runs once per
``package-lock.json`` (its hash names the directory) and ``vite build`` once per source tree
(the hash of every source file names the output). Runs at the same time (the SQLite and
PostgreSQL suites of ``make test``) share the cache under a file lock.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_SOURCE = ROOT.parent / "shared" / "ojs-admin-ui"
DEFAULT_CACHE = Path.home() / ".cache" / "django-ojs" / "admin-ui"
#: Not part of the source: what npm and vite write, and version control.
IGNORED = {"node_modules", "dist", "dist-app", ".git"}
#: npm ci and vite build each take about 10 s here; a loaded machine may take far longer.
COMMAND_TIMEOUT = 900


class BuildUnavailable(Exception):
    """The UI cannot be built here (no source or no npm); the message says what is missing."""


def source_dir() -> Path:
    return Path(os.environ.get("OJS_ADMIN_UI_SOURCE", DEFAULT_SOURCE)).resolve()


def cache_dir() -> Path:
    return Path(os.environ.get("OJS_ADMIN_UI_CACHE", DEFAULT_CACHE))


def _files(source: Path) -> list[Path]:
    out = []
    for dirpath, dirnames, filenames in os.walk(source):
        dirnames[:] = sorted(d for d in dirnames if d not in IGNORED)
        out.extend(Path(dirpath, name) for name in sorted(filenames))
    return out


def _digest(source: Path, files: list[Path]) -> str:
    h = hashlib.sha256()
    for file in files:
        h.update(str(file.relative_to(source)).encode() + b"\0")
        h.update(file.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _copy(source: Path, files: list[Path], target: Path) -> None:
    """Copy the source files (contents only: the shared copy is read-only)."""
    for file in files:
        dest = target / file.relative_to(source)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if dest.exists():
            dest.chmod(0o644)
        shutil.copyfile(file, dest)


def _run(command: list[str], cwd: Path, log: Path) -> None:
    with log.open("ab") as out:
        out.write(f"$ {' '.join(command)}\n".encode())
        out.flush()
        result = subprocess.run(
            command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, timeout=COMMAND_TIMEOUT
        )
    if result.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{' '.join(command)} failed ({result.returncode}):\n{tail}")


def build() -> Path:
    """The built UI's directory (``dist-app/``), built now or taken from the cache."""
    source = source_dir()
    if not (source / "package-lock.json").is_file():
        raise BuildUnavailable(
            f"the ojs-admin-ui source is not at {source} (set OJS_ADMIN_UI_SOURCE)"
        )
    npm = shutil.which("npm")
    npx = shutil.which("npx")
    if not npm or not npx:
        raise BuildUnavailable("npm is needed to build the official admin UI")
    files = _files(source)
    lock_hash = hashlib.sha256((source / "package-lock.json").read_bytes()).hexdigest()[:16]
    source_hash = _digest(source, files)
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    out = cache / f"build-{source_hash}" / "dist-app"
    with (cache / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if (out / "index.html").is_file():
            return out
        work = cache / f"node-{lock_hash}"
        log = cache / f"build-{source_hash}.log"
        _copy(source, files, work)
        if not (work / "node_modules" / ".ojs-npm-ci-done").is_file():
            _run([npm, "ci", "--no-audit", "--no-fund"], work, log)
            (work / "node_modules" / ".ojs-npm-ci-done").touch()
        # vite build, not `npm run build:app`: that runs `tsc -b` first, which fails on the
        # upstream source (an unused variable), and `npm run build` is the library build.
        staging = Path(tempfile.mkdtemp(prefix="dist-app-", dir=cache))
        try:
            _run([npx, "--no-install", "vite", "build", "--outDir", str(staging)], work, log)
            if not (staging / "index.html").is_file():
                raise RuntimeError(f"vite build wrote no index.html; see {log}")
            out.parent.mkdir(parents=True, exist_ok=True)
            staging.rename(out)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return out
