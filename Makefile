# make repro: set up (once) and run the pipeline.   make test: set up (once) and run the tests.
VENV ?= .venv
PY := $(VENV)/bin/python
export PATH := $(abspath $(VENV))/bin:$(PATH)
export TOKENIZERS_PARALLELISM := false
export HF_HUB_DISABLE_TELEMETRY := 1
export DO_NOT_TRACK := 1

.PHONY: setup repro test test-fast bench clean-runs mlflow-ui

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml requirements.lock
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c requirements.lock -e '.[dev]' || { df -h . ; \
	  echo "make: the install failed (pip's error is above). The pinned stack needs about 8 GB free here (7 GB in $(VENV), torch's CUDA wheels most of it)." >&2 ; exit 1 ; }
	$(PY) -m pip check
	touch $@

repro: setup
	test -d .dvc || dvc init --quiet
	dvc repro
	@echo; echo "Report: reports/comparison.md   MLflow: make mlflow-ui"

test: setup
	$(PY) -m pytest

test-fast: setup
	$(PY) -m pytest -m "not slow"

# benchmarks on this machine, after `make repro` (tables printed, JSON in reports/bench/); about 55 min on 2 CPU cores
bench: setup
	test -d models/variants/lora || $(MAKE) repro
	$(PY) benchmarks/iteration.py
	$(PY) benchmarks/ladder.py
	$(PY) benchmarks/padding.py
	$(PY) benchmarks/eval_speed.py
	$(PY) benchmarks/overhead.py
	$(PY) benchmarks/step_profile.py --compare
	$(PY) benchmarks/label_choice.py
	@echo; echo "On a CUDA machine: $(PY) benchmarks/gpu_check.py   (one table; reports/bench/gpu.json)"

mlflow-ui: setup
	@$(PY) -c "from bakeoff import config, tracking; print('open', tracking.ui_url(config.load_params()))"
	mlflow ui --backend-store-uri sqlite:///$(abspath mlflow.db) --port 5000
