# The two commands: `make run` (the main job on the default model) and `make test` (the test suite).
# Both create .venv, install everything (torch pinned to the local CPU build) and fetch the default model.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: run test install model bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

model: install
	$(PY) -m verispec fetch

run: model
	$(PY) -m verispec demo

test: model
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) build *.egg-info
