# mojolearn: `make test` and `make bench` set everything up on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.deps-stamp
BENCH_STAMP := $(VENV)/.bench-stamp
DOCS_STAMP := $(VENV)/.docs-stamp
PYTEST_ARGS ?=
# SmolLM2-135M (GGUF) for the slow model tests, the bench and the quality gate; kept outside git
MODEL_CACHE ?= $(HOME)/.cache/mojolearn
SMOLLM2 := $(MODEL_CACHE)/SmolLM2-135M-Instruct.Q4_1.gguf
export MOJOLEARN_MODEL_CACHE := $(MODEL_CACHE)

.PHONY: all build model quality test test-fast fuzz bench conformance wheel clean gpu-compile arm-compile gpu-check device-check docs

all: build

$(STAMP): requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	touch $(STAMP)

$(BENCH_STAMP): requirements-bench.txt $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-bench.txt -c requirements-dev.txt || \
	  echo "make bench: torch could not be installed; its columns will be skipped"
	touch $(BENCH_STAMP)

$(DOCS_STAMP): requirements-docs.txt $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-docs.txt -c requirements-dev.txt
	touch $(DOCS_STAMP)

build: $(STAMP)
	$(PY) build_native.py

# the documentation site into build/docs/, strict: a broken link, a `::: name` that does
# not exist or any other warning fails (tests/test_docs.py checks the docstrings and
# runs the examples); the API reference is read from the sources, no extension imported
docs: $(DOCS_STAMP)
	$(PY) -m mkdocs build --strict -f mkdocs.yml -d build/docs

$(SMOLLM2): | $(STAMP)
	$(PY) bench/fetch_model.py $(MODEL_CACHE)

model: $(SMOLLM2)

# the quality gate on SmolLM2-135M: fixed15_v1 vs fp32_v1 perplexity, prose and code
quality: build $(SMOLLM2)
	PYTHONPATH=python $(PY) -m mojolearn quality $(SMOLLM2) --profile fixed15_v1 \
	  --builtin prose --builtin code --model-name SmolLM2-135M

test: build $(SMOLLM2) docs
	$(PY) -m pytest tests $(PYTEST_ARGS)

test-fast: build docs
	$(PY) -m pytest tests -m "not slow" $(PYTEST_ARGS)

# the long fuzz run: FUZZ_EXAMPLES cases per entry (default 400), FUZZ_SEED; prints cases per entry
FUZZ_EXAMPLES ?= 400
FUZZ_SEED ?= 11
fuzz: build
	$(PY) -m tests.fuzz_run --examples $(FUZZ_EXAMPLES) --seed $(FUZZ_SEED)

# once per CPU build this CPU runs (bench/results/cpu-<box>-<isa>.json); the others are named and
# skipped. First the estimate for this machine (bench/estimate.py), then one line per case.
# QUICK=1: the smoke run (small shapes, 3 reps) on the best build only, into *-quick.json (not
# committed; bench/report.py ignores it)
QUICK ?=
BENCH_ISAS = $$(PYTHONPATH=python $(PY) -c "from mojolearn._core import cpu as _cpu; r = _cpu.runnable(); print(' '.join(r[:1] if '$(QUICK)' else r))")
bench: build $(BENCH_STAMP) $(SMOLLM2)
	@PYTHONPATH=python $(PY) -c "from mojolearn._core import cpu as _cpu; [print(f'make bench: skipped isa={n}: {_cpu.refusal(n)}') for n in _cpu.isa_names() if _cpu.refusal(n)]"
	@$(PY) bench/estimate.py $(if $(QUICK),--quick) $(BENCH_ISAS)
	for isa in $(BENCH_ISAS); do \
	  PYTHONPATH=python MOJOLEARN_ISA=$$isa $(PY) bench/run.py $(if $(QUICK),--quick) || exit 1; done

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
