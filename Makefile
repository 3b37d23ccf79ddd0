# privclust: the two set-up commands are `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: run test browser lint format bench clean compose-test

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "privclust needs Python 3.11 or newer")'
	@$(PYTHON) -m venv $(VENV) || { rm -rf $(VENV); echo "Could not create a virtual environment. On Debian/Ubuntu: sudo apt install python3-venv" >&2; exit 1; }
	@$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	@touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $@ $(VENV)/.installed

run: $(VENV)/.installed
	$(BIN)/privclust serve

test: $(VENV)/.installed-dev
	$(BIN)/pytest

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
