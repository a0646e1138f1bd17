# Relay: developer and CI entry points. `make test` is what CI runs (.ci/run).

SHELL := /bin/bash
.DEFAULT_GOAL := test

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The real DBOS Python SDK: only the integration tests use it (they run unmodified executors against Relay).
DBOS_SDK := dbos==3.2.0
PYTEST_ARGS ?=
RELAY_ARGS ?=

.PHONY: venv run test lint clean distclean

venv: $(STAMP)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Reinstall only when the packaging metadata (or this file's pins) changed since the last install.
$(STAMP): pyproject.toml setup.cfg Makefile | $(BIN)/python
	$(BIN)/python -m pip install --disable-pip-version-check -e '.[test]' '$(DBOS_SDK)'
	touch $@

run: venv
	$(BIN)/relay serve $(RELAY_ARGS)

# pytest's exit code passes through: 5 (no tests collected) fails the build like any other failure.
test: venv
	$(BIN)/ruff check .
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: venv
	$(BIN)/ruff check .

# Build and test leftovers. Keeps .venv (see distclean) and relay-data (someone's local store).
clean:
	rm -rf build dist .pytest_cache .ruff_cache test-output .test-output htmlcov .coverage
	find . -path ./$(VENV) -prune -o -name '*.egg-info' -prune -exec rm -rf {} + \
		-o -name __pycache__ -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
