# The two commands of the README. Each creates .venv by itself.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: run test lint bench clean

$(BIN)/federator: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $@

## make run: install and run the hub (federator up) on its embedded default
run: $(BIN)/federator
	$(BIN)/federator up $(ARGS)

## make test: install and run the whole test suite, plus the layering and type checks
test: $(BIN)/federator
	$(BIN)/lint-imports
	$(BIN)/mypy
	$(BIN)/python -m pytest -p no:cacheprovider $(PYTEST_ARGS)

lint: $(BIN)/federator
	$(BIN)/lint-imports
	$(BIN)/mypy

## make bench: run every benchmark (never part of the test run)
bench: $(BIN)/federator
	for b in bench/*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .federator build *.egg-info
