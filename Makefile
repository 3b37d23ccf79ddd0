# privclust: the two set-up commands are `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: run test browser lint format bench clean compose-test

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "privclust needs Python 3.11 or newer")'
	@$(PYTHON) -m venv $(VENV) || { rm -rf $(VENV); echo "Could not create a virtual environment. On Debian/Ubuntu: sudo apt install python3-venv" >&2; exit 1; }
	@$(BIN)/python -m pip install --quiet --upgrade pip

# The library (lib/, its own distribution) first, then the service that depends on it. The
# library's editable install puts lib/ itself on the path ("compat"), so a folder named
# privclust in the current directory cannot shadow it as a namespace package.
LIBRARY := --config-settings editable_mode=compat -e './lib[dask,s3,parquet,federation]'

$(VENV)/.installed: pyproject.toml lib/pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet $(LIBRARY)
	$(BIN)/pip install --quiet -e .
	@touch $@

$(VENV)/.installed-dev: pyproject.toml lib/pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet $(LIBRARY)
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $@ $(VENV)/.installed

run: $(VENV)/.installed
	$(BIN)/privclust serve

# The suite on every core, at most 4: each test has its own SQLite file and ports, each process
# its own embedded redis-server, so a slow test no longer holds up the rest. `PYTEST_ARGS=-n0`
# runs it in one process (as the tests on a shared PostgreSQL and Redis must run).
PYTEST_ARGS ?= -n auto --maxprocesses=4 --dist worksteal
test: $(VENV)/.installed-dev
	$(BIN)/pytest $(PYTEST_ARGS)

# Debian's Chromium for the console's browser tests (they skip without one).
browser:
	scripts/install-browser.sh

# docker-compose.yml built and run for real (root; installs Docker and builds local stand-ins for
# the images it would pull): docs/self-hosting.md says what it proves.
compose-test:
	scripts/compose-test.sh

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python scripts/check_layout.py
	@tmp=$$(mktemp -d) && PRIVCLUST_DATABASE_URL=sqlite:///$$tmp/check.db $(BIN)/alembic upgrade head >/dev/null 2>&1 \
		&& PRIVCLUST_DATABASE_URL=sqlite:///$$tmp/check.db $(BIN)/alembic check; rc=$$?; rm -rf $$tmp; exit $$rc

format: $(VENV)/.installed-dev
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: $(VENV)/.installed-dev
	$(BIN)/python bench/table1.py
	$(BIN)/python bench/speed.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
