# Two commands for a fresh clone: `make demo` and `make test`. Each sets itself up (venv, installs,
# embedded model with checksum) and skips work already done on a second run.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := .make
DEMO_DB := demo_data/smartrestaurant.sqlite
DEMO_KB := demo_data/kb
export HF_HUB_OFFLINE := 1
export LITELLM_LOCAL_MODEL_COST_MAP := True
export MLFLOW_DISABLE_TELEMETRY := true
export OMP_WAIT_POLICY := PASSIVE

.PHONY: setup models demo aria test test-fast mlflow-ui clean

$(BIN)/python:
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) (Python 3.11)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# Reinstall only when the package definition changes; the editable install tracks the code itself.
$(STAMP)/installed: pyproject.toml setup.py | $(BIN)/python
	@mkdir -p $(STAMP)
	# torch first and pinned: pip takes the local CPU wheel instead of resolving a CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev,local-models]'
	@touch $@

setup: $(STAMP)/installed

models: setup
	$(BIN)/reflect-sql models ensure --model qwen2.5-coder-1.5b
	$(BIN)/reflect-sql models ensure --model qwen2.5-coder-0.5b

# The paper's restaurant questions, answered by the embedded model with their traces.
demo: models
	$(BIN)/reflect-sql demo-db create --out $(DEMO_DB) --if-missing
	$(BIN)/reflect-sql demo --db $(DEMO_DB) --kb-dir $(DEMO_KB)

# Aria, the paper's restaurant assistant, end to end on PostgreSQL: the demo data loaded into a local
# PostgreSQL (bundled with pgvector by the pgserver package, data under demo_data/aria), its KB built
# on pgvector, and the web chat on http://127.0.0.1:8750/ (Ctrl-C stops both).
aria: models
	$(BIN)/reflect-sql demo-db create --out $(DEMO_DB) --if-missing
	$(BIN)/reflect-sql aria --sqlite $(DEMO_DB) --dir demo_data/aria

test: models
	$(BIN)/pytest

test-fast: setup
	$(BIN)/pytest -m "not embedded_lm and not slow"

mlflow-ui: setup
	$(BIN)/mlflow ui --backend-store-uri sqlite:///mlruns.db --host 127.0.0.1 --port 5058 --workers 1

clean:
	rm -rf $(STAMP) demo_data .pytest_cache
