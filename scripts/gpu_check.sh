#!/usr/bin/env bash
# The GPU check of issue 13, prepared for one lent H200 (139 GiB; torch, transformers, accelerate, peft; no vLLM,
# no internet): 2 RL steps of `python -m harness train` on random-initialised Qwen2 models at the 1.5B shape
# (full fine-tune) and the 7B shape (LoRA), measured peak GPU memory next to the memory plan's, tokens/s of
# generation and update. What it does and why: scripts/gpu_check.py. Must finish in under 8 minutes; the timeout
# below enforces it.
#
#   bash scripts/gpu_check.sh                  # on the GPU machine (results in $OUT or results/gpu_check)
#   bash scripts/gpu_check.sh --cpu-dry-run    # the same path on the CPU, tiny shapes (tests/test_gpu_check.py)
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
exec timeout --signal=TERM --kill-after=10 "${GPU_CHECK_TIMEOUT_S:-470}" "$PYTHON" -m scripts.gpu_check "$@"
