# Two entry points, both self-bootstrapping on a fresh machine with Python 3.11:
#   make demo   offline plan of the default stack (gke-dev)
#   make test   lint, format check and the whole test suite
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
STACK  ?= gke-dev

.PHONY: demo test lint plan clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/spotproof plan --stack $(STACK) --out out/$(STACK) --json out/$(STACK).json

test: $(STAMP) lint
	$(BIN)/pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

plan: demo

clean:
	rm -rf $(VENV) out .pytest_cache .ruff_cache
