# One venv for everything; torch comes first from the local CPU wheel (any other torch spec pulls CUDA).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup quickstart test test-main test-docker bench
$(BIN)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[all,test]'
	touch $@

setup: $(BIN)/.installed

quickstart: setup
	$(BIN)/openenv-echo quickstart echo

# Everything, as CI runs it: the container tier (needs root for dockerd), then the main tier.
test: test-docker test-main

test-main: setup
	$(BIN)/python -m pytest -q -m "not docker"

test-docker: setup
	PYTHON=$(BIN)/python bash scripts/docker/ci-tier.sh

bench: setup
	$(BIN)/python bench/bench_server.py
