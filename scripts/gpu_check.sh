#!/usr/bin/env bash
# A few-minute check of zoo on a machine with a CUDA GPU and vLLM (pip install -e '.[vllm,dev]'):
# prints one PASS/FAIL line per check and writes the figures to FIGURES (default gpu-check-figures.txt).
#
#   scripts/gpu_check.sh [FIGURES]          PYTHON=... to pick the interpreter (default: python)
#
# Checks (each with a time limit; logs under $WORK/logs):
#   1. the tiny-model tests on CUDA: the suite's tests pick no device, and everything that goes through
#      zoo.run.trainer.setup (zoo bench, zoo run) runs on CUDA when it is available; so: tests/bench/test_bench_decode.py
#      (bench on CUDA, decode bound), the vLLM tests (tests/backends/test_vllm*.py, tests/bench/test_vllm_bench.py: engine on CUDA), and a 3-step
#      grpo run with `hf` on the tiny model
#   2. 3 grpo steps with `hf` and with `vllm` on a randomly initialised model of SmolLM2-135M's shape
#      (built from a config in code, saved to a temp folder: no Hub)
#   3. vLLM's sync on CUDA, awake (sleep_level 0) and through sleep/wake (sleep_level 1 and 2)
#   4. zoo bench --backend hf,vllm on that model (start-up, tokens/s, time/sync, decode distance)
# Exit status: 0 if every check passed, 1 if one failed, 2 if there is no CUDA GPU or no vLLM.
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
FIG=${1:-gpu-check-figures.txt}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 WANDB_MODE=offline TOKENIZERS_PARALLELISM=false

if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
    echo "gpu_check: FAIL: no CUDA GPU (torch.cuda.is_available() is False for $PY); run this on a machine with an NVIDIA GPU"
    exit 2
fi
if ! "$PY" -c 'import vllm' >/dev/null 2>&1; then
    echo "gpu_check: FAIL: vLLM does not import in $PY; install it with: pip install -e '.[vllm]'"
    exit 2
fi

WORK=$(mktemp -d -t zoo-gpu-check-XXXX)
mkdir -p "$WORK/logs"
FAILED=0
{
    echo "# zoo scripts/gpu_check.sh $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null)"
    "$PY" -c 'import torch, vllm, transformers; print(f"gpu={torch.cuda.get_device_name(0)}"); print(f"torch={torch.__version__}"); print(f"vllm={vllm.__version__}"); print(f"transformers={transformers.__version__}")'
} > "$FIG"

# check NAME SECONDS COMMAND...: run it with a time limit, print PASS/FAIL with its seconds, keep its log
check() {
    local name=$1 limit=$2; shift 2
    local log="$WORK/logs/$name.log" t0=$SECONDS rc
    timeout "$limit" "$@" > "$log" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then
        echo "PASS $name ($((SECONDS - t0)) s)"
        echo "${name}_s=$((SECONDS - t0))" >> "$FIG"
    else
        [ $rc -eq 124 ] && why="timed out after $limit s" || why="exit $rc"
        echo "FAIL $name ($why; last line: $(tail -n 1 "$log" | cut -c1-160); log: $log)"
        FAILED=1
    fi
    return $rc
}
figures() {  # figure lines (key=value) of a passed check's log into FIGURES
    grep -E '^[a-z0-9_]+=' "$1" >> "$FIG"
}

check models 300 "$PY" scripts/gpu_check.py models "$WORK" && figures "$WORK/logs/models.log"
check tests-tiny-cuda 600 "$PY" -m pytest -q -x -m "not slow" tests/bench/test_bench_decode.py tests/backends/test_vllm_config.py \
    tests/backends/test_vllm.py tests/bench/test_vllm_bench.py
check grpo-tiny-hf 300 "$PY" -m zoo.cli run "$WORK/run-tiny-hf.yaml"
check grpo-smol-hf 600 "$PY" -m zoo.cli run "$WORK/run-smol-hf.yaml"
check grpo-smol-vllm 600 "$PY" -m zoo.cli run "$WORK/run-smol-vllm.yaml"
for level in 0 1 2; do
    check "vllm-sync-sleep$level" 300 "$PY" scripts/gpu_check.py sync "$level" && figures "$WORK/logs/vllm-sync-sleep$level.log"
done
check bench-hf-vllm 600 "$PY" -m zoo.cli bench grpo --model "$WORK/smol" --prompts 4 --group-size 8 --max-new-tokens 64 \
    --steps 2 --ignore-eos --task "$("$PY" -c 'import json, sys; sys.path.insert(0, "scripts"); import gpu_check; print(json.dumps(gpu_check.TASK))')" \
    --backend hf --backend '{name: vllm, gpu_memory_utilization: 0.3, max_model_len: 1024}' --out "$WORK/bench.json" \
    && "$PY" scripts/gpu_check.py figures "$WORK/bench.json" >> "$FIG"

echo "figures: $FIG; logs: $WORK/logs"
if [ $FAILED -ne 0 ]; then
    echo "gpu_check: FAIL (see the FAIL lines above)"
    exit 1
fi
echo "gpu_check: PASS"
