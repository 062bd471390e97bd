# Every target sets itself up: a fresh machine needs nothing but python3.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test lint demo bench docs clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,dev]'
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/ruff check gen_agent tests
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check gen_agent tests
	$(BIN)/ruff format --check gen_agent tests || true
	$(BIN)/mypy gen_agent

demo: $(STAMP)
	$(BIN)/python -m gen_agent demo

bench: $(STAMP)
	$(BIN)/python tests/benchmarks/run.py

clean:
	rm -rf $(VENV) build dist *.egg-info benchmarks.json
