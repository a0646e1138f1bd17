# Relay: developer and CI entry points. `make test` is what CI runs (.ci/run).

SHELL := /bin/bash
.DEFAULT_GOAL := test

PYTHON ?= python3
# Two environments. .venv-relay is Relay as a user installs it, with its data-plane extra (the newest `dbos`, for
# its public DBOSClient): `make run` serves from it, and so does every `relay serve` the tests start. .venv is the
# test harness: Relay, the test extras and the DBOS SDK release the test executors run (dbos 3.2.0, whose
# conductor client the wire tests import), which cannot share one environment with the data plane's newer `dbos`.
RELAY_VENV := .venv-relay
RELAY_BIN := $(RELAY_VENV)/bin
RUNTIME_STAMP := $(RELAY_VENV)/.installed
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The real DBOS Python SDK: only the integration tests use it (they run unmodified executors against Relay).
DBOS_SDK := dbos==3.2.0
PYTEST_ARGS ?=
RELAY_ARGS ?=

.PHONY: toolchains venv runtime system-deps test-deps run test compat-matrix lint bench clean distclean

venv: $(STAMP)

runtime: $(RUNTIME_STAMP)

$(RELAY_BIN)/python:
	$(PYTHON) -m venv $(RELAY_VENV)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Reinstall only when the packaging metadata (or this file's pins) changed since the last install.
$(RUNTIME_STAMP): pyproject.toml setup.cfg Makefile constraints.txt | $(RELAY_BIN)/python
	$(RELAY_BIN)/python -m pip install --disable-pip-version-check -c constraints.txt -e '.[dataplane]'
	touch $@

$(STAMP): pyproject.toml setup.cfg Makefile constraints.txt | $(BIN)/python
	$(BIN)/python -m pip install --disable-pip-version-check -c constraints.txt -e '.[test]' '$(DBOS_SDK)'
	touch $@

# Relay with its data plane (no test extras); `relay` is then .venv-relay/bin/relay.
run: runtime
	$(RELAY_BIN)/relay serve $(RELAY_ARGS)

# System packages the tests need, from Debian's archive (CI runs as root on a fresh Debian 12 machine that has
# none of them running): PostgreSQL's server binaries (tests/support/pg.py starts a throwaway cluster from them,
# as a non-root user on a free port), haproxy (tests/integration/test_ha.py puts three instances behind it) and
# chromium (the console's browser tests drive Debian's Chromium through Playwright, never a browser build of
# Playwright's own), and promtool, from the `prometheus` package (tests/integration/test_ops_kit.py checks the
# alerting rules and lints a live scrape with it). apt-get installs whichever is missing; nothing runs when all
# are there. Only promtool is wanted from `prometheus`: its recommended node exporter is left out, and
# the server the package starts (systemd, or its init script where no systemd runs) is stopped and disabled.
CHROMIUM := /usr/bin/chromium
HAPROXY := /usr/sbin/haproxy
PROMTOOL := /usr/bin/promtool
PG_INITDB := $(firstword $(wildcard /usr/lib/postgresql/*/bin/initdb))
SYSTEM_PACKAGES := $(if $(PG_INITDB),,postgresql) $(if $(wildcard $(HAPROXY)),,haproxy) \
	$(if $(wildcard $(CHROMIUM)),,chromium)
SYSTEM_PACKAGES := $(strip $(SYSTEM_PACKAGES))
PROMTOOL_PACKAGE := $(if $(wildcard $(PROMTOOL)),,prometheus)

system-deps:
ifneq ($(SYSTEM_PACKAGES)$(PROMTOOL_PACKAGE),)
	apt-get update
endif
ifneq ($(SYSTEM_PACKAGES),)
	DEBIAN_FRONTEND=noninteractive apt-get install -y $(SYSTEM_PACKAGES)
endif
ifneq ($(PROMTOOL_PACKAGE),)
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(PROMTOOL_PACKAGE)
	-invoke-rc.d prometheus stop
	-update-rc.d prometheus disable
	-if [ -d /run/systemd/system ]; then systemctl disable --now prometheus; fi
endif

# The other clients of Relay that integration tests run, each in an environment of its own (none shares our
# dependencies): an older DBOS Python release (version skew), the current one (whose conductor client is no
# longer open source: the data plane's test app), dbos-mcp (a real Conductor API v2 client),
# openapi-python-client (a real generator of clients from /openapi-3.0.json), the DBOS
# TypeScript, Go and Java SDKs, and the current TypeScript and Go releases (no open conductor client either: the
# data plane's other test apps). Pins: tests/integration/requirements/*.txt, ts_app/package-lock.json,
# go_app/go.mod+go.sum, java_app/pom.xml, ts_current_app/package-lock.json, go_current_app/go.mod+go.sum.
# Stamps and build outputs make a second run a no-op; editing a pin file rebuilds only that client.
REQS := tests/integration/requirements
VENV_DBOS2 := .venv-dbos2
VENV_DBOS_CURRENT := .venv-dbos-current
VENV_MCP := .venv-mcp
VENV_OPENAPI_CLIENT := .venv-openapi-client
TS_APP := tests/integration/ts_app
GO_APP := tests/integration/go_app
GO_APP_BIN := $(GO_APP)/bin/relay-go-app
JAVA_APP := tests/integration/java_app
JAVA_APP_JAR := $(JAVA_APP)/target/relay-java-app.jar
TS_CURRENT_APP := tests/integration/ts_current_app
# The identity provider the identity tests run (npm oidc-provider, pinned by tests/idp/package-lock.json).
TEST_IDP := tests/idp
CONSOLE_AXE := tests/e2e/axe
GO_CURRENT_APP := tests/integration/go_current_app
GO_CURRENT_APP_BIN := $(GO_CURRENT_APP)/bin/relay-go-current-app

# The previous release of Relay, built from git as a user installs it (its own pins, its data-plane extra), for the
# rolling-upgrade test (tests/integration/test_rolling_upgrade.py): CHANGELOG.md's newest "Commit:" line with a
# full hash names it. A clone without that commit (a shallow one) stops here with git's error.
PREVIOUS_RELAY := .venv-relay-previous
PREVIOUS_COMMIT := $(shell sed -n 's/^Commit: \([0-9a-f]\{40\}\)$$/\1/p' CHANGELOG.md | head -n 1)
$(PREVIOUS_RELAY)/.installed: CHANGELOG.md
	rm -rf $(PREVIOUS_RELAY) $(PREVIOUS_RELAY)-src
	mkdir -p $(PREVIOUS_RELAY)-src
	git archive $(PREVIOUS_COMMIT) | tar -x -C $(PREVIOUS_RELAY)-src
	$(PYTHON) -m venv $(PREVIOUS_RELAY)
	$(PREVIOUS_RELAY)/bin/python -m pip install --disable-pip-version-check -q \
		-c $(PREVIOUS_RELAY)-src/constraints.txt '$(PREVIOUS_RELAY)-src[dataplane]'
	rm -rf $(PREVIOUS_RELAY)-src
	echo $(PREVIOUS_COMMIT) > $@

test-deps: $(VENV_DBOS2)/.installed $(VENV_DBOS_CURRENT)/.installed $(VENV_MCP)/.installed \
	$(VENV_OPENAPI_CLIENT)/.installed $(TS_APP)/node_modules/.installed \
	$(GO_APP_BIN) $(JAVA_APP_JAR) $(TS_CURRENT_APP)/node_modules/.installed $(GO_CURRENT_APP_BIN) \
	$(TEST_IDP)/node_modules/.installed $(CONSOLE_AXE)/node_modules/.installed $(PREVIOUS_RELAY)/.installed


# The test venvs, each made by `python -m venv` and given its requirements file.
TEST_VENVS := $(VENV_DBOS2) $(VENV_DBOS_CURRENT) $(VENV_MCP) $(VENV_OPENAPI_CLIENT)
$(VENV_DBOS2)/.installed: $(REQS)/dbos2.txt
$(VENV_DBOS_CURRENT)/.installed: $(REQS)/dbos-current.txt
$(VENV_MCP)/.installed: $(REQS)/mcp.txt
$(VENV_OPENAPI_CLIENT)/.installed: $(REQS)/openapi-client.txt

$(addsuffix /bin/python,$(TEST_VENVS)): %/bin/python:
	$(PYTHON) -m venv $*

$(addsuffix /.installed,$(TEST_VENVS)): %/.installed: | %/bin/python
	$*/bin/python -m pip install --disable-pip-version-check -q -r $<
	touch $@

# npm ci installs exactly package-lock.json (and starts from an empty node_modules).
$(TS_APP)/node_modules/.installed: $(TS_APP)/package.json $(TS_APP)/package-lock.json
	cd $(TS_APP) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# The Go executor, built once per change of its source or pins (go.sum verifies every module it downloads).
$(GO_APP_BIN): $(GO_APP)/main.go $(GO_APP)/go.mod $(GO_APP)/go.sum
	cd $(GO_APP) && go build -mod=readonly -trimpath -o bin/relay-go-app .

$(TS_CURRENT_APP)/node_modules/.installed: $(TS_CURRENT_APP)/package.json $(TS_CURRENT_APP)/package-lock.json
	cd $(TS_CURRENT_APP) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

$(TEST_IDP)/node_modules/.installed: $(TEST_IDP)/package.json $(TEST_IDP)/package-lock.json
	cd $(TEST_IDP) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# axe-core, pinned, for the console's accessibility test (tests/e2e/test_console_accessibility.py).
$(CONSOLE_AXE)/node_modules/.installed: $(CONSOLE_AXE)/package.json $(CONSOLE_AXE)/package-lock.json
	cd $(CONSOLE_AXE) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

$(GO_CURRENT_APP_BIN): $(GO_CURRENT_APP)/main.go $(GO_CURRENT_APP)/go.mod $(GO_CURRENT_APP)/go.sum
	cd $(GO_CURRENT_APP) && go build -mod=readonly -trimpath -o bin/relay-go-current-app .

# The Java executor: one jar with its dependencies beside it (target/lib), every plugin pinned in pom.xml.
$(JAVA_APP_JAR): $(JAVA_APP)/pom.xml $(shell find $(JAVA_APP)/src -type f 2>/dev/null)
	cd $(JAVA_APP) && mvn -q -B package
	touch $@

# The toolchains the test apps build with (Go, Node.js, a JDK, Maven) and the Python the environments are made
# with, checked first: a missing or too old one stops `make test` at once, naming it, the version needed (read from
# the pins) and how to get it.
toolchains:
	@command -v $(PYTHON) >/dev/null || { echo "make test: $(PYTHON) not found: Python 3.11 or newer is needed" \
		"(apt-get install python3 python3-venv, or make PYTHON=python3.1x)." >&2; exit 1; }
	$(PYTHON) tests/support/check_toolchains.py

# pytest's exit code passes through: 5 (no tests collected) fails the build like any other failure.
test: toolchains venv runtime system-deps test-deps
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# Rewrite the README's generated blocks (the SDK compatibility matrix, what dbos-mcp exercised) from a real run.
compat-matrix: toolchains venv system-deps test-deps
	RELAY_UPDATE_README=1 $(BIN)/python -m pytest -q tests/integration/test_compat_matrix.py \
		tests/integration/test_dbos_mcp.py

# mypy's settings (what is strict, the untyped libraries) are in pyproject.toml's [tool.mypy].
lint: venv
	$(BIN)/ruff check .
	$(BIN)/mypy

# The benchmark suite (bench/, issue 6), not part of `make test`: real `relay serve` processes against
# simulated executors; writes bench/RESULTS.md. BENCH_ARGS=--quick divides every count by 20 (a few minutes).
# Its own pins (websockets, py-spy) are in bench/requirements.txt.
BENCH_ARGS ?=
BENCH_STAMP := $(VENV)/.bench-installed

$(BENCH_STAMP): bench/requirements.txt | $(STAMP)
	$(BIN)/python -m pip install --disable-pip-version-check -q -r bench/requirements.txt
	touch $@

bench: venv $(BENCH_STAMP)
	$(BIN)/python -m bench.run $(BENCH_ARGS)

# The peer of `python -m bench.run --only argus` (bench/argus.py): dbos-argus, pinned in bench/argus-requirements.txt,
# in its own venv .venv-argus made from a Python >= 3.12 found on the machine (PATH, then ~/.pyenv/versions); the
# bench installs it too when missing, and without such a Python it reports argus' columns as empty.
.PHONY: bench-argus-peer
bench-argus-peer: venv $(BENCH_STAMP)
	$(BIN)/python -m bench.argus --install-peer

# Build and test leftovers. Keeps .venv (see distclean) and relay-data (someone's local store).
clean:
	rm -rf build dist .pytest_cache .ruff_cache test-output .test-output htmlcov .coverage
	find . -path ./$(VENV) -prune -o -path ./$(RELAY_VENV) -prune -o -name '*.egg-info' -prune -exec rm -rf {} + \
		-o -name __pycache__ -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) $(RELAY_VENV) $(VENV_DBOS2) $(VENV_DBOS_CURRENT) $(VENV_MCP) $(VENV_OPENAPI_CLIENT) $(TS_APP)/node_modules $(GO_APP)/bin $(JAVA_APP)/target \
		$(TS_CURRENT_APP)/node_modules $(GO_CURRENT_APP)/bin $(TEST_IDP)/node_modules
