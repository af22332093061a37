# The two commands of the README. Each creates .venv by itself.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: run test test-loaded lint bench clean

$(BIN)/federator: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $@

## make run: install and run the hub (federator up) on its embedded default
run: $(BIN)/federator
	$(BIN)/federator up $(ARGS)

## make test: install and run the whole test suite, plus the layering and type checks
## (JOBS=2 pytest-xdist workers by default; JOBS=1 runs it in one process)
test: $(BIN)/federator
	$(BIN)/lint-imports
	$(BIN)/mypy
	$(BIN)/python -m pytest -p no:cacheprovider -n $(or $(JOBS),2) $(PYTEST_ARGS)

## make test-loaded: the test run while two CPU hogs compete for the cores (RUNS=3 for three in a row)
test-loaded: $(BIN)/federator
	$(BIN)/python scripts/with_cpu_hogs.py --hogs 2 --runs $(or $(RUNS),1) -- $(MAKE) test

lint: $(BIN)/federator
	$(BIN)/lint-imports
	$(BIN)/mypy

## make bench: run every benchmark (never part of the test run)
bench: $(BIN)/federator
	for b in bench/*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .federator build *.egg-info
