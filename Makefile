# The two commands of the README. Each creates .venv by itself.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# the browser the tests in tests/ui drive (`make test` installs Debian's where missing)
CHROMIUM ?= /usr/bin/chromium
# PyTorch for the distributed training run through the hub (tests/hub/test_pytorch_run.py): Debian's python3-torch
# (CPU, about 150 MB, for /usr/bin/python3), which the simulated member's process runtime runs the job with
TORCH ?= /usr/lib/python3/dist-packages/torch/__init__.py
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

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
## (JOBS=2 pytest-xdist workers by default; JOBS=1 runs it in one process; --dist loadgroup keeps a module
## marked xdist_group, such as tests/ui's browser suite with its one hub, on one worker)
test: $(BIN)/federator $(CHROMIUM) $(TORCH)
	$(BIN)/lint-imports
	$(BIN)/mypy
	FEDERATOR_CHROMIUM=$(CHROMIUM) $(BIN)/python -m pytest -p no:cacheprovider -n $(or $(JOBS),2) --dist loadgroup $(PYTEST_ARGS)

# Debian's Chromium for the browser tests (tests/ui, through Playwright), installed where missing; without its
# recommends (printing, samba, perl: about a minute of unpacking on a fresh machine), plus a font for screenshots.
$(CHROMIUM):
	@command -v apt-get >/dev/null 2>&1 || { echo "error: the browser tests (tests/ui) need Chromium at $(CHROMIUM); \
	this machine has no apt-get: install Chromium yourself, or pass CHROMIUM=/path/to/chromium" >&2; exit 1; }
	@echo "installing Debian's chromium for the browser tests (tests/ui)"
	$(SUDO) apt-get update -q
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends chromium fonts-liberation

# Debian's PyTorch for tests/hub/test_pytorch_run.py, installed where missing (without recommends: no CUDA, no
# multi-GB wheel); present, this target does nothing.
$(TORCH):
	@command -v apt-get >/dev/null 2>&1 || { echo "error: the distributed training test (tests/hub/test_pytorch_run.py) \
	needs PyTorch for /usr/bin/python3; this machine has no apt-get: install it yourself, or pass TORCH=/path/to/torch/__init__.py" >&2; exit 1; }
	@echo "installing Debian's python3-torch for the distributed training test (tests/hub/test_pytorch_run.py)"
	$(SUDO) apt-get update -q
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends python3-torch

## make test-loaded: the test run while two CPU hogs compete for the cores (RUNS=3 for three in a row)
test-loaded: $(BIN)/federator
	$(BIN)/python scripts/with_cpu_hogs.py --hogs 2 --runs $(or $(RUNS),1) -- $(MAKE) test

lint: $(BIN)/federator
	$(BIN)/lint-imports
	$(BIN)/mypy

## make bench: run every benchmark (never part of the test run) but bench/multikueue.py (run it by name)
bench: $(BIN)/federator
	for b in bench/*.py; do [ "$$b" = bench/multikueue.py ] || $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .federator build *.egg-info
