# Two commands do all set-up on a fresh machine:
#   make demo   - the main job end to end on the offline example (scripted model, real containers)
#   make test   - the whole test suite against the real Docker engine
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: setup deps engine images browser check test demo demo-history bench clean-containers

setup: deps engine images

# Debian's chromium and chromedriver, for the report pages' browser tests (only `make test` needs them).
browser:
	@bash scripts/ensure-browser.sh

deps: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml setup.py
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,check]'
	@touch $@

engine:
	@bash scripts/ensure-engine.sh

images: deps engine
	$(BIN)/harness images build

# The shape of the code: lint and format (ruff), types (mypy), and the import contracts of
# ARCHITECTURE.md (import-linter). `make test` runs them before the tests.
check: deps
	$(BIN)/ruff check harness sandbox tests setup.py
	$(BIN)/ruff format --check harness sandbox tests setup.py
	$(BIN)/mypy
	$(BIN)/lint-imports

test: setup browser check
	$(BIN)/python -m pytest $(PYTEST_ARGS)

demo: setup
	$(BIN)/harness run --image py311 --model scripted:examples/calc-fix.yaml examples/calc --task "Fix the failing tests in calc." --verify "python3 -m pytest -q"

# The second demo: benchmark tasks mined from the example's own history, checked in the sandbox, run
# by the reference model (offline), and the report (100% completion).
DEMO_DIR ?= /tmp/harness-demo-history
demo-history: setup
	rm -rf $(DEMO_DIR) && mkdir -p $(DEMO_DIR)
	$(BIN)/harness tasks mine examples/mathlib.bundle -o $(DEMO_DIR)/tasks.yaml
	$(BIN)/harness tasks check $(DEMO_DIR)/tasks.yaml
	$(BIN)/harness batch $(DEMO_DIR)/tasks.sound.yaml --out $(DEMO_DIR)/batch --model reference:
	$(BIN)/harness report $(DEMO_DIR)/batch

bench: setup
	$(BIN)/harness bench startup
	$(BIN)/harness bench sandbox
	$(BIN)/harness bench snapshot
	$(BIN)/harness bench tools
	$(BIN)/harness bench run

clean-containers:
	$(BIN)/harness sandbox prune --all
