# fedcore: two commands for a newcomer — `make run` and `make test`.
# Both create .venv when missing and (re)install only when pyproject.toml changed.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test install lint pytest clean lock

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
	$(VENV)/bin/ruff check fedcore components pipelines tests benchmarks scripts experiments

pytest: $(STAMP)
	PYTHON=$(PY) bash scripts/ensure-kubectl.sh
	bash scripts/ensure-datasets.sh
	$(PY) -m pytest

test: lint pytest

# The image's hashed lock (docker/requirements.lock) after a change to pyproject.toml's dependencies.
# Needs uv (UV=/path/to/uv or on PATH) and PyPI; tests/deploy/test_lock.py says when it is due.
lock:
	$(PYTHON) scripts/lock.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis runs
