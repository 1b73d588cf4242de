# The whole set-up on a fresh machine: `make test` and `make demo`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test demo lint bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,spark]'
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

test: lint
	$(BIN)/pytest -q -ra

demo: $(STAMP)
	$(BIN)/python -m rlmm.demo
	RLMM_CONFIG=config/embedded.toml RLMM_DATA_DIR=demo-data $(BIN)/rlmm segments list
	RLMM_CONFIG=config/embedded.toml RLMM_DATA_DIR=demo-data $(BIN)/rlmm verify --deep

bench: $(STAMP)
	mkdir -p bench/results
	for b in bench/*.py; do $(BIN)/python $$b > bench/results/$$(basename $$b .py).json || exit 1; done

clean:
	rm -rf $(VENV) demo-data bench/results
