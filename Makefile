# Everything a fresh machine needs is installed by `make install`, which the other targets call.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
RUN_STAMP := $(VENV)/.installed-run
ZK_JAR := /usr/share/java/zookeeper.jar
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: install install-run zookeeper tools run test check lint typecheck unit soak bench proto docs clean

# Everything the tests and benchmarks use: the package with its extras, ZooKeeper, the neighbours.
install: $(STAMP) zookeeper tools

# What the gateway alone needs (`make run`): the package and ZooKeeper, no Spark and no test tools.
install-run: $(RUN_STAMP) zookeeper

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,spark]'
	touch $(STAMP) $(RUN_STAMP)

$(RUN_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	touch $(RUN_STAMP)

# The ZooKeeper server jar, for standalone mode and the integration tests (ZOOKEEPER_HOME also works).
zookeeper:
	@if [ -z "$$ZOOKEEPER_HOME" ] && [ ! -f $(ZK_JAR) ]; then \
		$(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq zookeeper; \
	fi

# The neighbours the tests start: nginx (ingress: header injection, forwarded headers, PROXY
# protocol through its stream module), HAProxy (PROXY v2, SNI routing), Prometheus and promtool (scrapes, alert-rule tests);
# wrk is the HTTP benchmark's load; javac and RE2J (libre2j-java) run the broker's regex engines in
# the topic-pattern differential test.
tools:
	@missing=""; \
	[ -x /usr/sbin/nginx ] || missing="nginx-light"; \
	[ -f /usr/lib/nginx/modules/ngx_stream_module.so ] || missing="$$missing libnginx-mod-stream"; \
	[ -x /usr/sbin/haproxy ] || missing="$$missing haproxy"; \
	command -v prometheus >/dev/null || missing="$$missing prometheus"; \
	command -v wrk >/dev/null || missing="$$missing wrk"; \
	command -v javac >/dev/null || missing="$$missing openjdk-17-jdk-headless"; \
	[ -f /usr/share/java/re2j.jar ] || missing="$$missing libre2j-java"; \
	if [ -n "$$missing" ]; then $(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; fi

run: install-run
	$(BIN)/pulsar-lookup-gateway standalone

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mkdocs build --strict --quiet

# The documentation site, into site/ (strict: a broken link or a page out of the nav fails).
docs: install
	$(BIN)/python -m pulsar_lookup_gateway.listeners.config.reference
	$(BIN)/mkdocs build --strict

typecheck: install
	$(BIN)/mypy pulsar_lookup_gateway tests bench

# The pure unit tests alone (no processes, no sockets): well under a minute.
unit: install
	$(BIN)/python -m pytest tests/unit -q

# Before a commit: ruff, the strict docs build, mypy and the unit tests.
check: lint typecheck unit

# Everything, on TEST_WORKERS xdist workers: most tests wait on real processes (ZooKeeper, the
# gateway, nginx, Spark), so more workers than cores pays. Each module stays on one worker; all
# that starts Spark is one group, first in line (tests/conftest.py, --dist loadgroup).
TEST_WORKERS ?= 3
test: lint typecheck
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup

# The reliability tests with longer runs and larger counts (`make test` runs the short version).
soak: install
	PULSAR_GATEWAY_SOAK=1 $(BIN)/python -m pytest tests/reliability -q -s

bench: install
	$(BIN)/python -m bench

proto: install
	$(BIN)/python -m grpc_tools.protoc -I listeners/protocol --python_out=listeners/protocol \
		--pyi_out=listeners/protocol listeners/protocol/pulsar_api.proto

clean:
	rm -rf $(VENV) build site *.egg-info .mypy_cache .ruff_cache .pytest_cache .hypothesis
