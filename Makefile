# The two commands of the quick start: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The web UI's end-to-end test drives Debian's chromium (never a browser Playwright downloads).
CHROMIUM := /usr/bin/chromium
# The real rabbitmqadmin (v1) the suite runs against Warren: taken from Debian's
# rabbitmq-server package into a cache under .venv, never installed or started.
RABBITMQADMIN_DIR := $(VENV)/rabbitmqadmin
RABBITMQADMIN := $(RABBITMQADMIN_DIR)/rabbitmqadmin
# The Spark pipeline runs on Java 17+: JAVA_HOME's if set, else the one on PATH.
JAVA := $(if $(JAVA_HOME),$(JAVA_HOME)/bin/java,java)

.PHONY: run test lint bench clean spark-cluster-test

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	@# The Spark pipeline (warren.spark, tests/spark) runs on a Java 17+ runtime.
	@major=$$($(JAVA) -version 2>&1 | sed -n 's/.*version "\(1\.\)\{0,1\}\([0-9]*\).*/\2/p' | head -n 1); \
	if [ "$${major:-0}" -lt 17 ]; then \
		if [ "$$(id -u)" = 0 ] && [ -z "$(JAVA_HOME)" ] && command -v apt-get >/dev/null 2>&1; then \
			apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q openjdk-17-jre-headless; \
		else \
			echo "Spark needs a Java 17+ runtime ($(JAVA) gave '$${major:-none}'): install openjdk-17-jre-headless, or set JAVA_HOME to a JRE 17+" >&2; \
			exit 1; \
		fi; \
	fi
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

$(CHROMIUM):
	@if [ "$$(id -u)" -eq 0 ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	else \
		echo "make test needs Debian's chromium at $(CHROMIUM) for the web UI test;" \
			"install it as root: apt-get install chromium" >&2; \
		exit 1; \
	fi

run: $(STAMP)
	$(BIN)/warren-server --data-dir ./data

$(RABBITMQADMIN): | $(BIN)/python
	mkdir -p $(RABBITMQADMIN_DIR)
	cd $(RABBITMQADMIN_DIR) && rm -rf package *.deb && apt-get download rabbitmq-server \
		&& dpkg -x rabbitmq-server_*.deb package
	cp -L "$$(find $(RABBITMQADMIN_DIR)/package -name rabbitmqadmin -type f | head -n 1)" $@
	rm -rf $(RABBITMQADMIN_DIR)/package $(RABBITMQADMIN_DIR)/*.deb
	chmod +x $@

test: $(STAMP) $(CHROMIUM) $(RABBITMQADMIN)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	@# pytest exits 5 when it collected no tests: not a failure of the code.
	WARREN_RABBITMQADMIN=$(RABBITMQADMIN) $(BIN)/pytest $(PYTEST_ARGS) || { status=$$?; [ $$status -eq 5 ] || exit $$status; }

bench: $(STAMP)
	$(BIN)/pip install --quiet -e '.[bench]'
	$(BIN)/python -m bench.run

# The pipeline's jobs on a Spark standalone master and two workers on loopback (also in `make test`).
spark-cluster-test: $(STAMP)
	$(BIN)/python -m pytest tests/spark/test_cluster.py

lint: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) build *.egg-info
