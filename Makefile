# make repro: set up (once) and run the pipeline.   make test: set up (once) and run the tests.
# make quick: a first answer in minutes (the same stages on a small budget, in quick/; the full run is make repro)
VENV ?= .venv
PY := $(VENV)/bin/python
LLAMA_CPP := 0.3.36
# llama-cpp-python compiles llama.cpp here (about 3 min on 2 cores); its multimodal library is not needed
LLAMA_CMAKE := -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
export PATH := $(abspath $(VENV))/bin:$(PATH)
export TOKENIZERS_PARALLELISM := false
export HF_HUB_DISABLE_TELEMETRY := 1
export DO_NOT_TRACK := 1

.PHONY: setup repro quick worker test test-fast bench screenshots clean-runs mlflow-ui

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml requirements.lock
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip download --quiet --no-deps --no-binary :all: llama-cpp-python==$(LLAMA_CPP) -d $(VENV)/src
	CMAKE_ARGS="$(LLAMA_CMAKE)" $(PY) -m pip install --quiet -c requirements.lock --find-links $(VENV)/src -e '.[dev]' || { df -h . ; \
	  echo "make: the install failed (pip's error is above). The pinned stack needs about 8 GB free here (7 GB in $(VENV), torch's CUDA wheels most of it); llama-cpp-python needs cmake and a C++ compiler." >&2 ; exit 1 ; }
	# llama.cpp's GGUF converter, from the same source (the export stage runs it; bakeoff.ship.export)
	mkdir -p $(VENV)/share/llama.cpp
	tar xzf $(VENV)/src/llama_cpp_python-$(LLAMA_CPP).tar.gz -C $(VENV)/share/llama.cpp --strip-components=3 \
	  llama_cpp_python-$(LLAMA_CPP)/vendor/llama.cpp/convert_hf_to_gguf.py \
	  llama_cpp_python-$(LLAMA_CPP)/vendor/llama.cpp/conversion llama_cpp_python-$(LLAMA_CPP)/vendor/llama.cpp/gguf-py
	$(PY) -m pip check
	touch $@

repro: setup
	$(VENV)/bin/bakeoff repro

quick: setup
	$(VENV)/bin/bakeoff quick
	@echo; echo "Quick look: quick/reports/comparison.md   The full bake-off: make repro"

# one machine's share of a bake-off on several machines (docs/several-machines.md):
#   make worker STAGES="evaluate@lora evaluate_from@dpo"     (no STAGES: every stage, restoring what others pushed)
worker: setup
	test -d .dvc || dvc init --quiet
	$(PY) -m bakeoff.run.worker $(STAGES)

# the tests run on TEST_WORKERS pytest-xdist workers, a file's tests on one (tests/conftest.py); 1: in one process
TEST_WORKERS ?= 2
PYTEST := $(PY) -m pytest $(if $(filter-out 0 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile)

test: setup
	$(VENV)/bin/ruff format --check src stages tests benchmarks
	$(VENV)/bin/ruff check src stages tests benchmarks
	$(VENV)/bin/deptry .
	$(PYTEST)

test-fast: setup
	$(VENV)/bin/ruff format --check src stages tests benchmarks
	$(VENV)/bin/ruff check src stages tests benchmarks
	$(VENV)/bin/deptry .
	$(PYTEST) -m "not slow"

# benchmarks on this machine, after `make repro` (tables printed, JSON in reports/bench/); about 70 min on 2 CPU cores
bench: setup
	test -d models/variants/lora || $(MAKE) repro
	$(PY) benchmarks/iteration.py
	$(PY) benchmarks/ladder.py
	$(PY) benchmarks/padding.py
	$(PY) benchmarks/eval_speed.py
	$(PY) benchmarks/overhead.py
	$(PY) benchmarks/step_profile.py --compare
	$(PY) benchmarks/label_choice.py
	$(PY) benchmarks/trial_time.py
	@echo; echo "On a CUDA machine: $(PY) benchmarks/gpu_check.py   (one table; reports/bench/gpu.json)"

# the README's two pictures of this run (reports/comparison.png, reports/mlflow_experiment.png), after make repro;
# the browser: the system's Chromium (apt-get install chromium) or Playwright's (python -m playwright install chromium)
screenshots: setup
	$(PY) -m pip install --quiet -c requirements.lock playwright
	$(PY) -m bakeoff.run.screenshots

mlflow-ui: setup
	$(VENV)/bin/bakeoff ui
