# django-ojs developer tasks. `make help` lists them. CI runs `make test` (see .ci/run).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PG_HOST ?= 127.0.0.1
PG_PORT ?= 5432
PG_USER ?= postgres
# Test databases: each run may name its own (the test database is test_<name>).
SQLITE_URL ?= sqlite:////tmp/django-ojs-$(shell id -u).sqlite3
PG_URL ?= postgres://$(PG_USER)@$(PG_HOST):$(PG_PORT)/ojs
# The jobs in a database of their own (tests/twodb/, tests/twodb_settings.py): its own
# default database, and beside it the jobs database (<name>_jobs; SQLite: <name>-jobs).
TWODB_SQLITE_URL ?= sqlite:////tmp/django-ojs-twodb-$(shell id -u).sqlite3
TWODB_PG_URL ?= postgres://$(PG_USER)@$(PG_HOST):$(PG_PORT)/ojs_twodb
PYTEST_ARGS ?=
PYTHON_DJ6 ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.13*/bin/python3 $(HOME)/.pyenv/versions/3.12*/bin/python3) $(shell command -v python3.13 python3.12 2>/dev/null))
VENV_DJ6 ?= .venv-django6
DEMO_PORT ?= 8000
# test-under-load: CPU burners, runs per database, which databases, pytest options (-x: stop at the first failure).
LOAD_BURNERS ?= 2
LOAD_RUNS ?= 3
LOAD_DATABASES ?= sqlite postgresql
LOAD_PYTEST_ARGS ?= -x
# make test: how many of its suites run at the same time.
TEST_JOBS ?= 4
# OJS conformance run: its own databases (CONF_DB and CONF_DB_l24) and ports (CONF_PORT, +1).
CONF_DB ?= ojs_conformance
CONF_PORT ?= 18765
# OJS extension conformance run (make conformance-ext): its own database and port, so it can
# run beside the others.
CONF_EXT_DB ?= ojs_conformance_ext
CONF_EXT_PORT ?= 18775

.DEFAULT_GOAL := help
PEERBENCH ?= ../shared/peerbench
PEERS ?= ojs pgqueuer
ROUNDS ?= 8
.PHONY: help demo dist docs docs-serve test test-suites test-sqlite test-postgres test-under-load test-pg-restart test-failover test-pgbouncer test-twodb test-django6 conformance conformance-ext browser-deps pgbouncer-deps lint typecheck check-migrations bench bench-http bench-worker bench-peers bench-peers-interleaved db-up clean

help: ## Show this help
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2}'

$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11) and "Python 3.11+ is required")'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e . --group dev
	@touch $@

venv: $(VENV)/.installed ## Create the virtualenv and install django-ojs with its dev tools

demo: $(VENV)/.installed ## Run the example project (SQLite) at http://127.0.0.1:8000/admin/ (admin/admin), with a worker
	$(PY) manage.py migrate --noinput
	DJANGO_SUPERUSER_PASSWORD=admin $(PY) manage.py createsuperuser --noinput --username admin --email admin@example.com 2>/dev/null || true
	@# The worker runs in the background and is stopped (SIGTERM: graceful) when runserver exits.
	@# A producer enqueues a mix of demo jobs every few seconds so the admin shows work flowing.
	@$(PY) manage.py ojs_worker --queues default,email & worker=$$!; \
	$(PY) manage.py demo_producer & producer=$$!; \
	trap 'kill -TERM $$producer $$worker 2>/dev/null; wait $$producer $$worker' EXIT; \
	$(PY) manage.py runserver 127.0.0.1:$(DEMO_PORT)

docs: $(VENV)/.installed ## Build the documentation site into site/ (MkDocs, strict: broken links and missing pages fail)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

docs-serve: $(VENV)/.installed ## Serve the documentation site at http://127.0.0.1:8001/ with live reload
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve --dev-addr 127.0.0.1:8001

lint: $(VENV)/.installed ## ruff check and format check, then mypy (make typecheck)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(MAKE) --no-print-directory typecheck

typecheck: $(VENV)/.installed ## mypy --strict on django_ojs (settings: tests.settings; see [tool.mypy] in pyproject.toml)
	$(VENV)/bin/mypy

check-migrations: $(VENV)/.installed ## Fail when models and migrations differ; run Django's checks
	$(PY) manage.py makemigrations --check --dry-run
	$(PY) manage.py check

browser-deps: ## Install chromium + chromedriver for the admin browser test when missing (apt-get; root or sudo)
	@if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then SUDO=""; elif command -v sudo >/dev/null 2>&1; then SUDO="sudo -n"; else SUDO=none; fi; \
	if [ "$$SUDO" != none ] && command -v apt-get >/dev/null 2>&1; then \
		echo "== Installing chromium and chromium-driver (apt-get) for the admin browser test"; \
		$$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver && exit 0; \
	fi; \
	if [ "$$CI" = "true" ]; then \
		echo "ERROR: chromium/chromedriver are missing and could not be installed; CI=true needs the browser test." >&2; exit 1; \
	fi; \
	echo "WARNING: chromium/chromedriver are missing: the admin browser test will be skipped (CI=true makes this an error)." >&2

pgbouncer-deps: ## Install PgBouncer for the pooler test when missing (apt-get; root or sudo)
	@if command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then SUDO=""; elif command -v sudo >/dev/null 2>&1; then SUDO="sudo -n"; else SUDO=none; fi; \
	if [ "$$SUDO" != none ] && command -v apt-get >/dev/null 2>&1; then \
		echo "== Installing pgbouncer (apt-get) for the PgBouncer test"; \
		$$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer && exit 0; \
	fi; \
	if [ "$$CI" = "true" ]; then \
		echo "ERROR: pgbouncer is missing and could not be installed; CI=true needs the PgBouncer test." >&2; exit 1; \
	fi; \
	echo "WARNING: pgbouncer is missing: the PgBouncer test will be skipped (CI=true makes this an error)." >&2

test-sqlite: $(VENV)/.installed browser-deps ## Run the whole suite on SQLite, then tests/twodb with the jobs in a second SQLite file
	DATABASE_URL=$(SQLITE_URL) $(PY) -m pytest $(PYTEST_ARGS)
	DATABASE_URL=$(TWODB_SQLITE_URL) DJANGO_SETTINGS_MODULE=tests.twodb_settings $(PY) -m pytest tests/twodb $(PYTEST_ARGS)

test-postgres: $(VENV)/.installed browser-deps pgbouncer-deps ## Run the whole suite on PostgreSQL, then tests/twodb with the jobs in a second database (fails when CI=true and it is unreachable)
	@if $(PY) -c "import psycopg; psycopg.connect(host='$(PG_HOST)', port=$(PG_PORT), user='$(PG_USER)', dbname='postgres', connect_timeout=5).close()" 2>/dev/null; then \
		echo "== PostgreSQL suite ($(PG_HOST):$(PG_PORT))"; \
		DATABASE_URL=$(PG_URL) $(PY) -m pytest $(PYTEST_ARGS) && \
		echo "== PostgreSQL, the jobs in a database of their own (tests/twodb)" && \
		DATABASE_URL=$(TWODB_PG_URL) DJANGO_SETTINGS_MODULE=tests.twodb_settings $(PY) -m pytest tests/twodb $(PYTEST_ARGS); \
	elif [ "$$CI" = "true" ]; then \
		echo "ERROR: PostgreSQL at $(PG_HOST):$(PG_PORT) is unreachable and CI=true: the PostgreSQL suite cannot run." >&2; exit 1; \
	else \
		echo "WARNING: PostgreSQL at $(PG_HOST):$(PG_PORT) is unreachable: the PostgreSQL suite was NOT run (CI=true makes this an error)." >&2; \
	fi

test-under-load: $(VENV)/.installed browser-deps ## Whole suite 3x on SQLite, then 3x on PostgreSQL, beside 2 CPU burners (by hand; stops at the first failure)
	@set -e; burners=""; \
	for _ in $$(seq $(LOAD_BURNERS)); do python3 -c "while True: pass" & burners="$$burners $$!"; done; \
	trap 'kill $$burners 2>/dev/null || true' EXIT; trap 'exit 130' INT TERM; \
	echo "== $(LOAD_BURNERS) CPU burners running (pids$$burners)"; \
	for database in $(LOAD_DATABASES); do \
		if [ "$$database" = sqlite ]; then url="$(SQLITE_URL)"; \
		elif $(PY) -c "import psycopg; psycopg.connect(host='$(PG_HOST)', port=$(PG_PORT), user='$(PG_USER)', dbname='postgres', connect_timeout=5).close()" 2>/dev/null; then url="$(PG_URL)"; \
		elif [ "$$CI" = "true" ]; then \
			echo "ERROR: PostgreSQL at $(PG_HOST):$(PG_PORT) is unreachable and CI=true: the PostgreSQL runs cannot run." >&2; exit 1; \
		else \
			echo "WARNING: PostgreSQL at $(PG_HOST):$(PG_PORT) is unreachable: the PostgreSQL runs were NOT done (CI=true makes this an error)." >&2; continue; \
		fi; \
		for run in $$(seq $(LOAD_RUNS)); do \
			echo "== Under load: $$database run $$run/$(LOAD_RUNS)"; \
			DATABASE_URL="$$url" $(PY) -m pytest $(LOAD_PYTEST_ARGS) $(PYTEST_ARGS); \
		done; \
	done; \
	echo "== Under load: no run failed"

test-pg-restart: $(VENV)/.installed ## Workers across real PostgreSQL restarts, on a private cluster it starts (by hand; needs initdb/pg_ctl)
	OJS_TEST_PG_RESTART=1 DATABASE_URL=$(PG_URL) $(PY) -m pytest -m pg_restart tests/acceptance/test_postgresql_restart.py $(PYTEST_ARGS)

test-failover: $(VENV)/.installed ## Workers, reaper, cron across a primary stopped hard and its standby promoted (async/sync); pages on a lagging replica (by hand; needs initdb/pg_ctl/pg_basebackup)
	OJS_TEST_FAILOVER=1 DATABASE_URL=$(PG_URL) $(PY) -m pytest -s -m failover tests/acceptance/test_failover.py tests/acceptance/test_replica_reads.py $(PYTEST_ARGS)

test-pgbouncer: $(VENV)/.installed pgbouncer-deps ## 3 workers behind a private PgBouncer in transaction mode: 5,000 jobs, then a pooler restart mid-drain (PostgreSQL; part of test-postgres)
	DATABASE_URL=$(PG_URL) $(PY) -m pytest -s -m pgbouncer tests/acceptance/test_pgbouncer.py $(PYTEST_ARGS)

test-twodb: $(VENV)/.installed ## Only tests/twodb: the jobs in a database of their own, on SQLite then PostgreSQL (part of test-sqlite and test-postgres)
	DATABASE_URL=$(TWODB_SQLITE_URL) DJANGO_SETTINGS_MODULE=tests.twodb_settings $(PY) -m pytest tests/twodb $(PYTEST_ARGS)
	DATABASE_URL=$(TWODB_PG_URL) DJANGO_SETTINGS_MODULE=tests.twodb_settings $(PY) -m pytest tests/twodb $(PYTEST_ARGS)

test-django6: ## Run the suite on Django 6.x (needs Python 3.12+; skipped with a notice when none is installed, an error when CI=true)
	@if [ -z "$(PYTHON_DJ6)" ]; then \
		if [ "$$CI" = "true" ]; then echo "ERROR: no Python 3.12+ found and CI=true: the Django 6.x suite cannot run." >&2; exit 1; fi; \
		echo "NOTICE: no Python 3.12+ found: the Django 6.x suite was not run."; exit 0; \
	fi; \
	set -e; \
	if [ ! -f $(VENV_DJ6)/.installed ] || [ pyproject.toml -nt $(VENV_DJ6)/.installed ]; then \
		$(PYTHON_DJ6) -m venv $(VENV_DJ6); \
		$(VENV_DJ6)/bin/python -m pip install --quiet --upgrade pip; \
		$(VENV_DJ6)/bin/python -m pip install --quiet -e . --group test "django>=6.0,<7"; \
		touch $(VENV_DJ6)/.installed; \
	fi; \
	echo "== Django $$($(VENV_DJ6)/bin/python -c 'import django; print(django.get_version())') suite on SQLite"; \
	DATABASE_URL=sqlite:////tmp/django-ojs-dj6-$$(id -u).sqlite3 $(VENV_DJ6)/bin/python -m pytest $(PYTEST_ARGS)

conformance: $(VENV)/.installed ## OJS conformance suites against the example project on PostgreSQL (levels 0 to 4 required)
	@if $(PY) -c "import psycopg; psycopg.connect(host='$(PG_HOST)', port=$(PG_PORT), user='$(PG_USER)', dbname='postgres', connect_timeout=5).close()" 2>/dev/null; then \
		PY=$(PY) PG_HOST=$(PG_HOST) PG_PORT=$(PG_PORT) PG_USER=$(PG_USER) CONF_DB=$(CONF_DB) CONF_PORT=$(CONF_PORT) .ci/conformance.sh; \
	elif [ "$$CI" = "true" ]; then \
		echo "ERROR: PostgreSQL at $(PG_HOST):$(PG_PORT) is unreachable and CI=true: the conformance suites cannot run." >&2; exit 1; \
	else \
		echo "WARNING: PostgreSQL at $(PG_HOST):$(PG_PORT) is unreachable: the conformance suites were NOT run (CI=true makes this an error)." >&2; \
	fi

conformance-ext: $(VENV)/.installed ## OJS extension suites (pinned in tests/conformance_ext) on PostgreSQL, required ones must pass
	@if $(PY) -c "import psycopg; psycopg.connect(host='$(PG_HOST)', port=$(PG_PORT), user='$(PG_USER)', dbname='postgres', connect_timeout=5).close()" 2>/dev/null; then \
		PY=$(PY) PG_HOST=$(PG_HOST) PG_PORT=$(PG_PORT) PG_USER=$(PG_USER) CONF_EXT_DB=$(CONF_EXT_DB) CONF_EXT_PORT=$(CONF_EXT_PORT) .ci/conformance-ext.sh; \
	elif [ "$$CI" = "true" ]; then \
		echo "ERROR: PostgreSQL at $(PG_HOST):$(PG_PORT) is unreachable and CI=true: the extension conformance suites cannot run." >&2; exit 1; \
	else \
		echo "WARNING: PostgreSQL at $(PG_HOST):$(PG_PORT) is unreachable: the extension conformance suites were NOT run (CI=true makes this an error)." >&2; \
	fi

test: lint check-migrations docs browser-deps pgbouncer-deps ## Everything CI runs: lint, migrations check, then SQLite, PostgreSQL, Django 6.x, OJS conformance (core and extensions) and the wheel's smoke test side by side
	@# The four suites use separate databases (and ports), so they run at the same time
	@# (TEST_JOBS of them; TEST_JOBS=1 runs them one after the other). Each suite's output
	@# is printed in one piece when it ends; the first failure fails the target.
	$(MAKE) --no-print-directory -j$(TEST_JOBS) --output-sync=target test-suites

test-suites: test-sqlite test-postgres test-django6 conformance conformance-ext dist

dist: $(VENV)/.installed ## Build the wheel and sdist into dist/, check them (twine), then install the wheel in a clean virtualenv and use it (tests/dist_smoke.py)
	rm -rf dist
	$(PY) -m pip install --quiet --group release
	$(PY) -m build --outdir dist . > /dev/null
	$(PY) -m twine check --strict dist/*
	$(PY) tests/dist_smoke.py dist/*.whl

bench: $(VENV)/.installed ## Run the benchmarks on PostgreSQL (by hand; see docs/explanation/performance.md)
	DATABASE_URL=postgres://$(PG_USER)@$(PG_HOST):$(PG_PORT)/ojs_bench $(PY) bench/enqueue.py

bench-peers: ## Side by side with pgqueuer (and Chancy) on a throwaway PostgreSQL 15 cluster: the shared peerbench harness (PEERS="ojs pgqueuer", PEERBENCH_N, PEERBENCH_ONLY=A,B,C)
	@if [ ! -f $(PEERBENCH)/run.sh ]; then echo "peerbench harness not found at $(PEERBENCH) (set PEERBENCH=...)"; exit 2; fi
	bash $(PEERBENCH)/run.sh $(PEERS)

bench-peers-interleaved: ## The harness's drain, django-ojs and pgqueuer in turn, one run each per round (ROUNDS=8; after one make bench-peers)
	PEERBENCH=$(PEERBENCH) python3 bench/peers_interleaved.py $(ROUNDS)

BENCH_HTTP_ARGS ?=
bench-http: $(VENV)/.installed ## The HTTP binding beside plain Django views, same server and run, median of 3 rounds (by hand; BENCH_HTTP_ARGS="--server granian")
	$(PY) -m pip install --quiet --group bench
	DATABASE_URL=postgres://$(PG_USER)@$(PG_HOST):$(PG_PORT)/ojs_bench_http $(PY) bench/http_api.py $(BENCH_HTTP_ARGS)

bench-worker: $(VENV)/.installed ## Worker drain throughput and pickup latency on PostgreSQL (see docs/explanation/performance-worker.md)
	DATABASE_URL=postgres://$(PG_USER)@$(PG_HOST):$(PG_PORT)/ojs_bench_worker $(PY) bench/drain.py --concurrency 500
	DATABASE_URL=postgres://$(PG_USER)@$(PG_HOST):$(PG_PORT)/ojs_bench_worker $(PY) bench/pickup_latency.py

db-up: ## Start a local PostgreSQL with docker compose (if you have no server on 5432)
	docker compose up -d postgres

clean: ## Remove virtualenvs and caches
	rm -rf $(VENV) $(VENV_DJ6) .pytest_cache .ruff_cache .mypy_cache
