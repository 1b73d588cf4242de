# The whole set-up on a fresh machine: `make test` and `make demo`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -n 1)
PLUGIN_JAR := build/rlmm-kafka-plugin.jar

.PHONY: test demo lint bench clean plugin

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --no-compile -e '.[test,spark]'
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The broker's half of the Kafka plugin (bridge/): one jar Kafka loads as its RSM and
# RLMM, forwarding every call to `rlmm serve`. Without Maven or Java it is not built and
# the tests that need it skip. Rebuilt only when its sources (or the version) changed,
# and replaced by a rename: the test workers each run `make plugin`, and a JVM reading
# the jar must never see it rewritten under it.
BRIDGE_SOURCES := bridge/pom.xml $(shell find bridge/src -type f 2>/dev/null)

plugin: $(PLUGIN_JAR)

$(PLUGIN_JAR): $(BRIDGE_SOURCES) pyproject.toml
	@missing=""; for tool in mvn java; do command -v $$tool >/dev/null 2>&1 || missing="$$missing $$tool"; done; \
	if [ -n "$$missing" ]; then \
		echo "plugin: $(PLUGIN_JAR) not built, not on PATH:$$missing (tests that need the jar skip)"; \
	else \
		mvn -q -B -f bridge/pom.xml package -Drevision=$(VERSION) && \
		mkdir -p build && cp bridge/target/rlmm-kafka-plugin-$(VERSION).jar $(PLUGIN_JAR).tmp && \
		mv -f $(PLUGIN_JAR).tmp $(PLUGIN_JAR); \
	fi

# Two workers: the suite waits on brokers and processes for about 40% of a serial run.
# tests/fixtures/workers.py keeps each session broker on one worker.
test: lint plugin
	$(BIN)/pytest -q -ra --durations=40 -n 2 --dist loadgroup

# The offloader over Kafka log dirs, the ops CLI on what it archived, then a Spark
# read of the archive (Spark's workers must run this venv's python).
demo: $(STAMP)
	$(BIN)/python -m rlmm.cli.demo
	$(BIN)/rlmm --config demo-data/demo.toml segments list
	$(BIN)/rlmm --config demo-data/demo.toml verify --deep
	PYSPARK_PYTHON=$(abspath $(BIN))/python PYSPARK_DRIVER_PYTHON=$(abspath $(BIN))/python \
		$(BIN)/python examples/spark_read.py --config demo-data/demo.toml --expected demo-data/expected.json

bench: $(STAMP)
	mkdir -p bench/results
	for b in bench/*.py; do $(BIN)/python $$b > bench/results/$$(basename $$b .py).json || exit 1; done

clean:
	rm -rf $(VENV) demo-data bench/results build bridge/target
