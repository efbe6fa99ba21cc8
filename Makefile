# mojolearn: `make test` and `make bench` set everything up on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.deps-stamp
BENCH_STAMP := $(VENV)/.bench-stamp
PYTEST_ARGS ?=
# SmolLM2-135M (GGUF) for the slow model tests, the bench and the quality gate; kept outside git
MODEL_CACHE ?= $(HOME)/.cache/mojolearn
SMOLLM2 := $(MODEL_CACHE)/SmolLM2-135M-Instruct.Q4_1.gguf
export MOJOLEARN_MODEL_CACHE := $(MODEL_CACHE)

.PHONY: all build model quality test test-fast fuzz bench conformance wheel clean gpu-compile arm-compile gpu-check device-check

all: build

$(STAMP): requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	touch $(STAMP)

$(BENCH_STAMP): requirements-bench.txt $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-bench.txt -c requirements-dev.txt || \
	  echo "make bench: torch could not be installed; its columns will be skipped"
	touch $(BENCH_STAMP)

build: $(STAMP)
	$(PY) build_native.py

$(SMOLLM2): | $(STAMP)
	$(PY) bench/fetch_model.py $(MODEL_CACHE)

model: $(SMOLLM2)

# the quality gate on SmolLM2-135M: fixed15_v1 vs fp32_v1 perplexity, prose and code
quality: build $(SMOLLM2)
	PYTHONPATH=python $(PY) -m mojolearn quality $(SMOLLM2) --profile fixed15_v1 \
	  --builtin prose --builtin code --model-name SmolLM2-135M

test: build $(SMOLLM2)
	$(PY) -m pytest tests $(PYTEST_ARGS)

test-fast: build
	$(PY) -m pytest tests -m "not slow" $(PYTEST_ARGS)

# the long fuzz run: FUZZ_EXAMPLES cases per entry (default 400), FUZZ_SEED; prints cases per entry
FUZZ_EXAMPLES ?= 400
FUZZ_SEED ?= 11
fuzz: build
	$(PY) -m tests.fuzz_run --examples $(FUZZ_EXAMPLES) --seed $(FUZZ_SEED)

# once per CPU build this CPU runs (bench/results/cpu-<box>-<isa>.json); the others are named and skipped
bench: build $(BENCH_STAMP) $(SMOLLM2)
	@PYTHONPATH=python $(PY) -c "from mojolearn import _cpu; [print(f'make bench: skipped isa={n}: {_cpu.refusal(n)}') for n in _cpu.isa_names() if _cpu.refusal(n)]"
	for isa in $$(PYTHONPATH=python $(PY) -c "from mojolearn import _cpu; print(' '.join(_cpu.runnable()))"); do \
	  PYTHONPATH=python MOJOLEARN_ISA=$$isa $(PY) bench/run.py || exit 1; done

# every CPU build this CPU runs (amx, v4, v3), each named; the others are skipped with the reason
conformance: build
	PYTHONPATH=python $(PY) -m mojolearn conformance --every-isa

# every GPU kernel compiled offline for sm_80, sm_90, gfx942 and apple-m3 (no GPU needed)
gpu-compile: $(STAMP)
	env PYTHONPATH= $(VENV)/bin/mojo run -I mojo mojo/compile_all_gpu.mojo

# the CPU extension compiled for aarch64 Linux (neoverse-v1) and arm64 macOS (apple-m1) to
# object files in build/cross/ (no ARM machine needed; the link needs one)
arm-compile: $(STAMP)
	$(PY) build_native.py --cross

# on a GPU box: GPU build, conformance on the GPU, GPU vs CPU bits, bench with GPU rows
device-check gpu-check: build
	bash bench/device_check.sh

wheel: build
	$(PY) -m pip wheel --no-deps --no-build-isolation -w dist .

clean:
	rm -rf build dist .build python/mojolearn/*.so python/mojolearn/_results .pytest_cache
	find . -name __pycache__ -prune -exec rm -rf {} +
