# Two commands do all set-up on a fresh machine:
#   make demo   - the main job end to end on the offline example (scripted model, real containers)
#   make test   - the whole test suite against the real Docker engine
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: setup deps deps-run engine podman podman-rootless test-podman test-podman-rootful test-elsewhere images images-demo browser check test test-fast demo demo-delegate demo-history demo-local local-model local-model-start harbor-start bench clean-containers

# Everything the tests need (the test and check toolchains, every image).
setup: deps engine images

# Debian's chromium and chromedriver, for the report pages' browser tests (only `make test` needs them).
browser:
	@bash scripts/ensure-browser.sh

deps: $(VENV)/.installed

# Only what running harness needs (the demos): no test or check toolchain.
deps-run: $(VENV)/.installed-run

$(VENV)/.installed-run: pyproject.toml setup.py
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -e .
	@touch $@

$(VENV)/.installed: pyproject.toml setup.py
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,check]'
	@touch $@ $(VENV)/.installed-run

engine:
	@bash scripts/ensure-engine.sh

# Rootful Podman behind its Docker-compatible socket (docs/scale.md): prints the DOCKER_HOST to use.
podman:
	@bash scripts/ensure-podman.sh

# Rootless Podman, run by a user of its own (docs/scale.md): prints the DOCKER_HOST to use.
podman-rootless:
	@bash scripts/ensure-podman.sh --rootless

# The engine tests of the sandbox, exec, egress, services and the loop's end-to-end and adversarial runs again on
# another engine (docs/scale.md), after the suite on Docker, the images copied from the default engine
# (scripts/copy-images.sh: no second bootstrap). test-podman: on rootless Podman, the service started as
# in `make podman-rootless`. test-elsewhere: on an engine that cannot see this machine's disk, a second
# Docker daemon with its own data root, host name, /tmp and network on a TCP socket on 127.0.0.1
# (tests/engine_elsewhere.py; its own tests, test_remote_engine.py, are that engine's already).
ENGINE_TESTS := tests/sandbox tests/cli/test_exec.py tests/agent/test_loop_e2e.py tests/agent/test_done_cannot_be_faked.py \
	tests/agent/test_loop_resume.py tests/agent/test_step_numbers.py tests/agent/test_verify.py tests/tools/test_services.py
ENGINE_PYTEST = $(BIN)/python -m pytest -m docker -n 3 --dist loadfile --durations=10
test-podman: deps images-demo
	@host=$$(bash scripts/ensure-podman.sh --rootless | sed -n 's/^export DOCKER_HOST=//p'); \
	bash scripts/copy-images.sh "$$host" && \
	DOCKER_HOST="$$host" $(ENGINE_PYTEST) $(ENGINE_TESTS) $(PYTEST_ARGS)

# Services on rootful Podman (started as in `make podman`): a network without a gateway, the services named
# in hosts files (docs/scale.md).
test-podman-rootful: deps images-demo
	@host=$$(bash scripts/ensure-podman.sh | sed -n 's/^export DOCKER_HOST=//p'); \
	bash scripts/copy-images.sh "$$host" && \
	DOCKER_HOST="$$host" $(ENGINE_PYTEST) tests/tools/test_services.py tests/sandbox/docker/test_services_network.py $(PYTEST_ARGS)

test-elsewhere: deps images-demo
	$(BIN)/python -m tests.engine_elsewhere $(ENGINE_PYTEST) $(ENGINE_TESTS) \
		--ignore tests/sandbox/docker/test_remote_engine.py $(PYTEST_ARGS)

# Every image, and the environment a test of the mined histories needs (Python from Debian bullseye):
# built here once, as a user would before a night's batch, not in the middle of the suite. The
# environment (its own base, bootstrapped from bullseye) builds beside the others; the language images
# and the hosted agents' build four at once (their builds wait mostly on downloads).
images: deps engine
	@$(BIN)/harness images build --env python:bullseye & env=$$!; \
	$(BIN)/harness images build && $(BIN)/harness images build agents; built=$$?; \
	wait $$env; envs=$$?; exit $$(( built || envs ))

# The demos run in py311 only: the base, the sandbox layer and py311 (go, node, rust come with
# `make images`, `make test`, or `harness images build NAME` when a task needs them).
images-demo: deps-run engine
	$(BIN)/harness images build py311

# The shape of the code: lint and format (ruff), types (mypy), and the import contracts of
# ARCHITECTURE.md (import-linter). `make test` runs them before the tests.
check: deps
	$(BIN)/ruff check harness sandbox tests setup.py
	$(BIN)/ruff format --check harness sandbox tests setup.py
	$(BIN)/mypy
	$(BIN)/lint-imports

# The real model of the tests (llama.cpp's server, built from source once per machine, under /var/tmp):
# `local-model-start` builds it in the background while the rest of `make test`'s set-up runs; the
# tests wait for it (tests/local_model.py).
local-model:
	@$(PYTHON) tests/local_model.py

local-model-start:
	@nohup $(PYTHON) tests/local_model.py > /var/tmp/harness-tests-local-model.log 2>&1 &

# Harbor (Python 3.12+) and OpenEnv's client, each in an environment of its own for the tests that use their code
# (tests/harbor_venv.py), made in the background like the local model; the tests wait for it.
harbor-start:
	@nohup $(PYTHON) tests/harbor_venv.py > /var/tmp/harness-tests-harbor.log 2>&1 &

# The project's modules compiled once and kept (__pycache__/, ignored by git) even where the
# environment says PYTHONDONTWRITEBYTECODE: the suite starts harness hundreds of times.
test test-fast: export PYTHONDONTWRITEBYTECODE :=

# Three workers, a whole test file each (a file's shared sessions and batches stay in one process; every
# test labels its containers with its worker's run id, so the workers never remove each other's). Three
# on two cores, not more: with three the two cores are busy throughout (a fourth took 913 s against
# 870 s). --no-loadscope-reorder keeps tests/conftest.py's order (longest files first).
# The images, the browser and the checks are made side by side (none needs another), while the local
# model and Harbor's environment build in the background.
test: local-model-start harbor-start deps engine
	@$(MAKE) --no-print-directory -j3 -Oline images browser check
	$(BIN)/python -m pytest -n 3 --dist loadfile --no-loadscope-reorder --durations=15 $(PYTEST_ARGS)

# The edit-test loop: the tests that need no engine, in parallel (no Docker, no browser, no image).
# Three workers on two cores here too: 50 s against 60 s with two (hook timeouts, retry waits and
# subprocesses leave a core idle).
test-fast: deps
	$(BIN)/python -m pytest -q -m "not docker and not slow" -n 3 $(PYTEST_ARGS)

# The example with a real model on this machine: SmolLM2-135M on llama.cpp's server (built once, a few
# minutes), whatever the outcome. A model this small calls a tool when made to and reads the result; it
# fixes nothing, so the run ends stuck: the honest outcome.
demo-local: deps-run engine images-demo local-model
	@echo "SmolLM2-135M can: call a tool (forced on its first turn), with arguments that fit the schema; read the result; answer."
	@echo "It cannot: find or fix a bug. Expect 'stuck' or 'failed_verification'; docs/models.md says why and what to change."
	-$(PYTHON) tests/local_model.py run -- $(BIN)/harness run --image py311 --model openai:smollm2 --base-url {base_url} \
		--config examples/local-model.toml examples/calc --task "Run python3 -m pytest -q and fix the failing tests in calc." \
		--verify "python3 -m pytest -q" --max-steps 6

demo: deps-run engine images-demo
	$(BIN)/harness run --image py311 --model scripted:examples/calc-fix.yaml examples/calc --task "Fix the failing tests in calc." --verify "python3 -m pytest -q"

# The example with a sub-agent: the run's agent hands the fix to a child under a share of its budget.
demo-delegate: deps-run engine images-demo
	$(BIN)/harness run --image py311 --delegate-depth 1 --model scripted:examples/delegate-fix.yaml examples/calc --task "Fix the failing tests in calc." --verify "python3 -m pytest -q"

# The second demo: benchmark tasks mined from the example's own history, checked in the sandbox, run
# by the reference model (offline), and the report (100% completion).
DEMO_DIR ?= /tmp/harness-demo-history
demo-history: deps-run engine images-demo
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
