# fedcore: two commands for a newcomer — `make run` and `make test`.
# Both create .venv when missing and (re)install only when pyproject.toml changed.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test install lint pytest test-containers clean lock bench-peers image stack-up stack-down

# pytest-xdist workers for make test: one per core (auto), a test module per worker at a time (tests/conftest.py).
# JOBS=0 runs in one process (for -x or pdb).
JOBS ?= auto
# Extra pytest arguments, e.g. PYTEST_ARGS="tests/engine -k resume".
PYTEST_ARGS ?=

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	bash scripts/ensure-datasets.sh
	$(PY) -m fedcore quickstart

lint: $(STAMP)
	$(VENV)/bin/ruff check fedcore components pipelines tests benchmarks scripts lab

pytest: $(STAMP)
	PYTHON=$(PY) bash scripts/ensure-kubectl.sh
	bash scripts/ensure-datasets.sh
	$(PY) -m pytest -n $(JOBS) --dist loadfile $(PYTEST_ARGS)

test: lint pytest

# The container tests alone (the image built by make image, pipeline tasks as hardened containers, the
# tracking stack): .ci/run's second step, after `make test` has run everything else without Docker.
test-containers: $(STAMP)
	FEDCORE_REQUIRE_DOCKER=1 $(PY) -m pytest -n $(JOBS) --dist loadfile tests/container $(PYTEST_ARGS)

# The image's hashed lock (docker/requirements.lock) after a change to pyproject.toml's dependencies.
# Needs uv (UV=/path/to/uv or on PATH) and PyPI; tests/deploy/test_lock.py says when it is due.
lock:
	$(PYTHON) scripts/lock.py

# The project image (./Dockerfile); prints `image: NAME:TAG` last. IMAGE=NAME:TAG to name it; BASE=local builds
# the Debian base with debootstrap first (no registry needed; also the fallback when the pinned base cannot be pulled).
image:
	bash scripts/build-image.sh

# The tracking stack as containers built here (Postgres, MLflow with basic-auth, an S3 store): docs/deploy.md.
stack-up:
	bash scripts/stack.sh up

stack-down:
	bash scripts/stack.sh down

# FedAvg in Flower's simulation engine against fedcore's two executors, same work (docs/performance.md).
# Flower comes from the `bench` extra's pin, installed once into .bench-pkgs/ (FLWR_PATH=DIR: one you have).
# The CNN runs CNN_ROUNDS rounds of CNN_EPOCHS local epochs (the preset's 40 x 5 is hours per framework on one
# thread).
FLWR_PATH ?= $(CURDIR)/.bench-pkgs
CNN_ROUNDS ?= 3
CNN_EPOCHS ?= 1
bench-peers: $(STAMP)
	bash scripts/ensure-datasets.sh
	@PYTHONPATH=$(FLWR_PATH) $(PY) -c "import flwr" 2>/dev/null || $(PY) -m pip install -q --target $(FLWR_PATH) \
		"$$($(PY) -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["bench"][0])')"
	FLWR_PATH=$(FLWR_PATH) $(PY) benchmarks/vs_flower.py --model mlp
	FLWR_PATH=$(FLWR_PATH) $(PY) benchmarks/vs_flower.py --model cnn --rounds $(CNN_ROUNDS) -s train.local_epochs=$(CNN_EPOCHS)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis runs .bench-pkgs
