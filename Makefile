# Two commands: `make run` and `make test` (see README.md).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000
export DJANGO_DEBUG ?= 1

.PHONY: run test test-durations test-bench bench lint format install install-dev system-deps cli-agents lock clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# Exactly the locked versions, checked against their hashes (requirements*.lock, made by
# `make lock` from pyproject.toml's ranges); then the project itself, with no dependencies.
$(VENV)/.installed: pyproject.toml requirements.lock | $(BIN)/python
	$(BIN)/pip install -q --require-hashes -r requirements.lock
	$(BIN)/pip install -q --no-deps -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml requirements-dev.lock | $(BIN)/python
	$(BIN)/pip install -q --require-hashes -r requirements-dev.lock
	$(BIN)/pip install -q --no-deps -e '.[dev]'
	touch $@ $(VENV)/.installed

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

run: install
	@mkdir -p var
	@sh scripts/ensure-bwrap.sh
	$(BIN)/python manage.py collectstatic --noinput -v 0
	$(BIN)/python manage.py migrate --noinput -v 0
	$(BIN)/python manage.py ensure_superuser
	$(BIN)/python manage.py recover_runs --all
	@echo "Harness on http://localhost:$(PORT)/  (Ctrl-C stops it)"
	$(BIN)/daphne -b $(HOST) -p $(PORT) harness_site.asgi:application

# System packages the tests use: bubblewrap (the bash sandbox) and Chromium, the browser
# and its headless shell (browser tests). Installed with apt-get when root and missing; otherwise those tests skip or
# fail with a clear reason.
system-deps:
	@missing=""; \
	command -v bwrap >/dev/null || missing="$$missing bubblewrap"; \
	[ -x /usr/bin/chromium ] || missing="$$missing chromium"; \
	[ -x /usr/bin/chromium-headless-shell ] || missing="$$missing chromium-headless-shell"; \
	if [ -n "$$missing" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing$$missing"; \
		DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	elif [ -n "$$missing" ]; then \
		echo "note: missing$$missing (not root: tests that need them will skip)"; \
	fi

# Four pytest-xdist workers, each given a whole test file at a time (--dist loadfile: a
# module's live server starts once, on one worker); most of a run waits on servers, the
# browser and subprocesses, so four share two cores well (measured on a 2-core host, the
# tests alone: 3 workers 9:55 with the cores 65% busy, 4 workers 9:04 and 9:08, 5 workers
# 9:30, its last 13% of the tests 4 minutes of a few slow files). The files go out longest
# first, by tests/durations.json (tests/durations.py; rewritten by `make test-durations`),
# not by their number of tests: 8:52 with 4 workers. TEST_WORKERS=0: one process.
TEST_WORKERS ?= 4
test: install-dev system-deps cli-agents
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

# Measures each test file's duration in a parallel run and rewrites tests/durations.json.
test-durations: install-dev system-deps cli-agents
	@mkdir -p var
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder \
		--junitxml=var/test-durations.xml -o junit_family=xunit1 $(PYTEST_ARGS)
	$(BIN)/python -m tests.durations var/test-durations.xml

# The benchmark's own test (tests/deploy/test_bench.py, marked `bench`): `manage.py bench`
# end to end at a small scale, every figure checked. Minutes of the machine, so not part of
# `make test` (pyproject.toml's addopts deselect the marker; this selects it).
test-bench: install-dev system-deps
	$(BIN)/python -m pytest -m bench $(PYTEST_ARGS)

# The external CLI agents (docs/FEATURES.md), at the versions the tests pin (listed in
# scripts/cli-agents.sh), into var/cli-agents, once: a finished install is kept per version
# set under ~/.cache/harness, so a fresh clone copies it. No npm or no registry: a note,
# and the end-to-end tests skip (they fail under HARNESS_REQUIRE_SERVICES=1).
cli-agents:
	@sh scripts/cli-agents.sh

# The performance benchmark (docs/PERFORMANCE.md): prints a table, writes var/bench/*.json.
# Options: make bench BENCH_ARGS="--levels 1,25 --processes 2 --redis-url redis://…";
# BENCH_ARGS="--only projects": projects' checkpoints, restores and clones alone.
bench: install-dev
	$(BIN)/python manage.py bench $(BENCH_ARGS)

lint: install-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install-dev
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# Re-resolve the lock files after a change to pyproject.toml: versions already locked are
# kept unless the ranges exclude them (`make lock LOCK_ARGS=--upgrade` takes the newest).
# The dev lock is constrained by the runtime one, so both install the same versions.
LOCK := $(VENV)-lock/bin/pip-compile --quiet --generate-hashes --strip-extras --allow-unsafe \
	--no-emit-index-url --no-emit-find-links $(LOCK_ARGS)
lock:
	[ -x $(VENV)-lock/bin/pip-compile ] || \
		{ $(PYTHON) -m venv $(VENV)-lock && $(VENV)-lock/bin/pip install -q pip-tools; }
	$(LOCK) -o requirements.lock pyproject.toml
	$(LOCK) --extra dev -c requirements.lock -o requirements-dev.lock pyproject.toml

clean:
	rm -rf $(VENV) $(VENV)-lock public .pytest_cache
