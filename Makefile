# The quick start: `make run` (a node, from nothing but Python 3.11+), `make pipeline`
# (the Spark pipeline's tools), `make test` (everything the suite needs, then the suite).
# `make mypyc` (opt-in) compiles the pure cores in place; `make clean-mypyc` undoes it.
# `make wheel` builds the release wheels (the cores compiled, and the pure fallback) in dist/;
# `make bench` measures the compiled one (`make bench PURE=1`: this checkout, pure Python).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# pip without its upgrade notice; every install is quiet unless it fails.
PIP := PIP_DISABLE_PIP_VERSION_CHECK=1 $(BIN)/pip install --quiet
# One stamp per set of extras, each redone when pyproject.toml changes, so `make run` then
# `make test` in one checkout upgrades the environment rather than finding it "installed".
RUN_STAMP := $(VENV)/.installed-run
PIPELINE_STAMP := $(VENV)/.installed-spark
TEST_STAMP := $(VENV)/.installed-test
# `make run PORT=5673 MGMT_PORT=15673 DATA_DIR=/tmp/warren`: each given one becomes a flag;
# those not given are left to warren-server (WARREN_PORT, WARREN_DATA_DIR …, then defaults:
# data in ./data, one worker process per core for a new data directory, WARREN_WORKERS=1
# for one process).
PORT ?=
MGMT_PORT ?=
DATA_DIR ?=
# Debian packages, as root, without recommended extras and without apt's chatter.
APT_INSTALL := DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends
# The suite runs on 4 pytest-xdist workers: its tests mostly wait (on nodes starting and
# stopping, on timers, on clients), which left a 2-core machine's cores half idle. Each xdist
# worker starts its own nodes on its own ports; tests that share a costly fixture (a module's
# cluster, the local Spark session's JVM) stay on one (tests/conftest.py, rule 4).
# `make test XDIST=` runs the suite in one process (docs/internals/workers.md, "The suite
# with 2 workers, and what CI runs").
XDIST ?= -n 4 --dist loadgroup
# What `make test` runs once more with 2 workers per node (WARREN_TEST_WORKERS=2, issue 19):
# the whole integration suite, and the cluster files where a node's queues live on two
# workers (among them the kill of one worker, which runs only then); not test_workers.py,
# whose nodes have 2 workers in the main run already, whatever WARREN_TEST_WORKERS says.
WORKERS_TESTS := tests/integration --ignore=tests/integration/test_workers.py \
	tests/cluster/test_remote_queues.py tests/cluster/test_cluster_mgmt.py
# How many of the slowest test steps (setup, call, teardown) `make test` lists.
DURATIONS ?= 30
# The web UI's end-to-end test drives Debian's chromium (never a browser Playwright downloads).
CHROMIUM := /usr/bin/chromium
# The real rabbitmqadmin (v1) the suite runs against Warren: taken from Debian's
# rabbitmq-server package into a cache under .venv, never installed or started.
RABBITMQADMIN_DIR := $(VENV)/rabbitmqadmin
RABBITMQADMIN := $(RABBITMQADMIN_DIR)/rabbitmqadmin
# The Spark pipeline runs on Java 17+: JAVA_HOME's if set, else the one on PATH.
JAVA := $(if $(JAVA_HOME),$(JAVA_HOME)/bin/java,java)

# The unit tests of what setup.py compiles (the pure cores, the runtime's per-message
# modules and the persistent publish path: the log, its records and journal, durability),
# which `make mypyc` runs on the compiled modules.
COMPILED_TESTS := tests/unit/amqp tests/unit/model tests/unit/queue tests/unit/raft \
	tests/unit/cluster tests/unit/runtime tests/unit/storage tests/unit/legacy
# The release build (docs/performance.md, "The release build"): `make wheel` builds, in
# .venv-build (never the checkout's environment, which stays pure), a platform wheel with the
# cores setup.py lists compiled by mypyc and the pure py3-none-any wheel that pip falls back
# to where no platform wheel fits. The compiler is mypy, pinned: its C is what we measured.
# msgspec is there for mypy to read its types (the compiled cores import it; pyproject.toml's
# range). Redone when the package's sources change.
BUILD_VENV := .venv-build
BUILD_STAMP := $(BUILD_VENV)/.installed
MYPYC_BUILD_DEPS := 'mypy==2.4.1' 'setuptools>=77,<81' 'msgspec>=0.19,<0.23' \
	'auditwheel>=6.8,<7' 'patchelf>=0.17,<0.20'
PACKAGE_SOURCES := setup.py pyproject.toml README.md $(shell find warren -type f -not -name '*.so' -not -path '*/__pycache__/*')
WHEELS_STAMP := dist/.built
# `make bench` runs the brokers it starts from .venv-bench: the compiled wheel installed alone.
BENCH_VENV := .venv-bench
BENCH_STAMP := $(BENCH_VENV)/.installed
# `make bench BENCH_ARGS='--only W1,W4 --reps 3'`: passed to `python -m bench.run`.
BENCH_ARGS ?=

.PHONY: run pipeline test java lint bench clean spark-cluster-test mypyc clean-mypyc compiler \
	wheel wheel-test

$(BIN)/python:
	$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11) and "Warren needs Python 3.11 or newer: make PYTHON=python3.11 …")'
	$(PYTHON) -m venv $(VENV)

$(RUN_STAMP): pyproject.toml | $(BIN)/python
	$(PIP) -e .
	touch $@

$(PIPELINE_STAMP): pyproject.toml | $(BIN)/python java
	$(PIP) -e '.[spark]'
	touch $@

$(TEST_STAMP): pyproject.toml | $(BIN)/python java
	$(PIP) -e '.[test]'
	touch $@

# The Spark pipeline (warren.spark, tests/spark) runs on a Java 17+ runtime; the broker never does.
java:
	@major=$$($(JAVA) -version 2>&1 | sed -n 's/.*version "\(1\.\)\{0,1\}\([0-9]*\).*/\2/p' | head -n 1); \
	if [ "$${major:-0}" -lt 17 ]; then \
		if [ "$$(id -u)" = 0 ] && [ -z "$(JAVA_HOME)" ] && command -v apt-get >/dev/null 2>&1; then \
			echo "Installing a Java 17 runtime for Spark (openjdk-17-jre-headless)"; \
			apt-get update -qq && $(APT_INSTALL) openjdk-17-jre-headless >/dev/null; \
		else \
			echo "Spark needs a Java 17+ runtime ($(JAVA) gave '$${major:-none}'): install openjdk-17-jre-headless, or set JAVA_HOME to a JRE 17+" >&2; \
			exit 1; \
		fi; \
	fi

$(CHROMIUM):
	@if [ "$$(id -u)" -eq 0 ]; then \
		echo "Installing Debian's chromium for the web UI test"; \
		apt-get update -qq && $(APT_INSTALL) chromium >/dev/null; \
	else \
		echo "make test needs Debian's chromium at $(CHROMIUM) for the web UI test;" \
			"install it as root: apt-get install --no-install-recommends chromium" >&2; \
		exit 1; \
	fi

run: $(RUN_STAMP)
	$(BIN)/warren-server $(if $(PORT),--port $(PORT)) $(if $(MGMT_PORT),--management-port $(MGMT_PORT)) $(if $(DATA_DIR),--data-dir $(DATA_DIR))

pipeline: $(PIPELINE_STAMP)
	@echo "The pipeline's tools are in $(BIN): $(BIN)/warren-pipeline --help"

$(RABBITMQADMIN): | $(BIN)/python
	mkdir -p $(RABBITMQADMIN_DIR)
	@# apt's sandbox user may not write here; root downloads it itself instead of warning.
	cd $(RABBITMQADMIN_DIR) && rm -rf package *.deb \
		&& apt-get download -qq -o APT::Sandbox::User=root rabbitmq-server \
		&& dpkg -x rabbitmq-server_*.deb package
	cp -L "$$(find $(RABBITMQADMIN_DIR)/package -name rabbitmqadmin -type f | head -n 1)" $@
	rm -rf $(RABBITMQADMIN_DIR)/package $(RABBITMQADMIN_DIR)/*.deb
	chmod +x $@

test: $(TEST_STAMP) $(CHROMIUM) $(RABBITMQADMIN)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	@# pytest exits 5 when it collected no tests: not a failure of the code. The slowest
	@# steps are listed, so every CI log shows where the suite's time goes.
	WARREN_RABBITMQADMIN=$(RABBITMQADMIN) $(BIN)/pytest $(XDIST) --durations=$(DURATIONS) $(PYTEST_ARGS) || { status=$$?; [ $$status -eq 5 ] || exit $$status; }
	@# The integration suite once more on nodes of 2 workers (issue 19), its slowest steps too.
	$(if $(PYTEST_ARGS),,WARREN_RABBITMQADMIN=$(RABBITMQADMIN) WARREN_TEST_WORKERS=2 $(BIN)/pytest $(XDIST) --durations=$(DURATIONS) $(WORKERS_TESTS))

# The release build's Warren (PURE=1: this checkout's) against RabbitMQ; the report says which.
bench: $(TEST_STAMP) $(if $(PURE),,$(BENCH_STAMP))
	$(PIP) -e '.[bench]'
	$(BIN)/python -m bench.run $(if $(PURE),,--warren-python $(BENCH_VENV)/bin/python) $(BENCH_ARGS)

$(BENCH_STAMP): $(WHEELS_STAMP)
	$(if $(wildcard $(BENCH_VENV)/bin/python),,$(PYTHON) -m venv $(BENCH_VENV))
	PIP_DISABLE_PIP_VERSION_CHECK=1 $(BENCH_VENV)/bin/pip install --quiet --force-reinstall --no-deps dist/warren_mq-*-cp*.whl
	PIP_DISABLE_PIP_VERSION_CHECK=1 $(BENCH_VENV)/bin/pip install --quiet dist/warren_mq-*-cp*.whl
	touch $@

wheel: $(WHEELS_STAMP)

# Each wheel from a clean build/ (setuptools' and mypyc's), so neither takes the other's files.
# setuptools tags the compiled wheel with this machine's platform (linux_x86_64), which PyPI
# refuses and pip elsewhere cannot judge; auditwheel checks which glibc symbols its
# extensions use and retags it with the oldest manylinux those allow (it needs patchelf).
$(WHEELS_STAMP): $(PACKAGE_SOURCES) $(BUILD_STAMP)
	rm -rf build dist
	PIP_DISABLE_PIP_VERSION_CHECK=1 $(BUILD_VENV)/bin/pip wheel --quiet --no-deps --no-build-isolation --wheel-dir dist .
	rm -rf build
	WARREN_MYPYC=1 PIP_DISABLE_PIP_VERSION_CHECK=1 $(BUILD_VENV)/bin/pip wheel --quiet --no-deps --no-build-isolation --wheel-dir dist/platform .
	rm -rf build
	PATH="$(abspath $(BUILD_VENV))/bin:$$PATH" auditwheel repair --wheel-dir dist dist/platform/*.whl
	rm -rf dist/platform
	@ls dist/*.whl
	touch $@

$(BUILD_STAMP): Makefile | compiler
	$(if $(wildcard $(BUILD_VENV)/bin/python),,$(PYTHON) -m venv $(BUILD_VENV))
	PIP_DISABLE_PIP_VERSION_CHECK=1 $(BUILD_VENV)/bin/pip install --quiet $(MYPYC_BUILD_DEPS)
	touch $@

# Each wheel installed into a fresh environment, a node started from it and a message through
# it (tests/release, a few minutes: not in `make test`).
wheel-test: $(WHEELS_STAMP) $(TEST_STAMP)
	WARREN_RELEASE_WHEELS=dist $(BIN)/pytest tests/release

# gcc and the interpreter's headers, which mypyc's C needs (installed as root on Debian).
compiler:
	@headers=$$($(PYTHON) -c 'import sysconfig; print(sysconfig.get_paths()["include"])'); \
	if ! command -v gcc >/dev/null 2>&1 || [ ! -f "$$headers/Python.h" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "Installing gcc and the Python headers for mypyc"; \
			apt-get update -qq && $(APT_INSTALL) gcc python3-dev >/dev/null; \
		else \
			echo "mypyc needs gcc and $$headers/Python.h (Debian: gcc python3-dev)" >&2; \
			exit 1; \
		fi; \
	fi

# The opt-in mypyc build in place (setup.py says which modules, docs/performance.md what it
# gains): C extensions next to the compiled modules' sources, which Python imports in their
# place, then those modules' unit tests on them. Needs the compiler, and the setuptools
# pyproject.toml's build needs, to run setup.py in place.
mypyc: $(TEST_STAMP) | compiler
	$(PIP) 'setuptools>=77,<81'
	WARREN_MYPYC=1 $(BIN)/python setup.py --quiet build_ext --inplace
	$(BIN)/python -c 'import warren.queue.machine as m; assert m.__file__.endswith(".so"), m.__file__'
	$(BIN)/pytest -m "not interpreted" $(COMPILED_TESTS)

clean-mypyc:
	rm -rf build
	find warren -name '*.so' -delete
	rm -f *__mypyc.*.so

# The pipeline's jobs on a Spark standalone master and two workers on loopback (also in `make test`).
spark-cluster-test: $(TEST_STAMP)
	$(BIN)/python -m pytest tests/spark/test_standalone_cluster.py

lint: $(TEST_STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean: clean-mypyc
	rm -rf $(VENV) $(BUILD_VENV) $(BENCH_VENV) build dist *.egg-info
