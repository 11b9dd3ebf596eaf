#!/usr/bin/env bash
# Feeds docs/results/performance-step.md, "The cheap step: before and after".
# Before/after `zoo bench` in one run on one machine: a commit (before) against this checkout (after),
# alternating, two rounds each, at the main job's size, at SmolLM2 32 x 64 and at the tiny Llama's
# 32 x 64; then, when a vLLM scratch venv is given, `--backend hf,vllm` on the same prompts.
#
#   bash bench/bench_before_after.sh c4696c2 [OUT_DIR] [VLLM_PYTHON]
#
# Needs the venv of README command 2 active. Run it on an idle machine: every figure is a wall time.
# Writes OUT_DIR/<size>_<before|after>_<round>.json (zoo bench --json; default out: runs/before_after)
# and prints the load average before each bench.
set -euo pipefail
USAGE="usage: bash bench/bench_before_after.sh COMMIT [OUT_DIR] [VLLM_PYTHON]  (COMMIT: the 'before' side, e.g. c4696c2)"
case "${1:-}" in
  "" | -h | --help) echo "$USAGE" >&2; exit 2 ;;
esac
BASE=$1
HERE=$(cd "$(dirname "$0")/.." && pwd)
git -C "$HERE" rev-parse -q --verify "$BASE^{commit}" >/dev/null || { echo "error: '$BASE' is not a commit of $HERE; $USAGE" >&2; exit 2; }
OUT=$(realpath -m "${2:-$HERE/runs/before_after}")
VLLM_PY=${3:-}
mkdir -p "$OUT"
WT=$(mktemp -d)/before
git -C "$HERE" worktree add -q --detach "$WT" "$BASE"
trap 'git -C "$HERE" worktree remove --force "$WT"' EXIT
export HF_HUB_OFFLINE=1 WANDB_MODE=offline TOKENIZERS_PARALLELISM=false
TINY="$OUT/tiny-model"
[ -d "$TINY" ] || PYTHONPATH="$HERE" python -c "import sys; from zoo.models.tiny import tiny_model_and_tokenizer as t; m, k = t(seed=0); m.save_pretrained(sys.argv[1]); k.save_pretrained(sys.argv[1])" "$TINY"
echo "machine: $(lscpu | grep 'Model name' | sed 's/ \+/ /g'); $(nproc) CPUs; $(grep -o 'avx512_bf16\|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
MAIN="grpo --lora --prompts 2 --group-size 4 --max-new-tokens 24 --micro-batch 16 --updates 1x2 --steps 2 --threads 2"
BIG="grpo --lora --prompts 4 --group-size 8 --max-new-tokens 64 --ignore-eos --micro-batch 16 --updates 1x2 --steps 2 --threads 2"
SMALL="grpo --model $TINY --prompts 8 --group-size 4 --max-new-tokens 64 --ignore-eos --autocast none --steps 3 --threads 2"
for round in 1 2; do
  for size in main big tiny; do
    case $size in main) ARGS=$MAIN ;; big) ARGS=$BIG ;; tiny) ARGS=$SMALL ;; esac
    for side in before after; do
      if [ $side = before ]; then SRC=$WT; else SRC=$HERE; fi
      echo "== round $round, $size, $side: load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%H:%M:%S)"
      # shellcheck disable=SC2086
      (cd "$SRC" && PYTHONPATH="$SRC" python -m zoo.cli bench $ARGS --json --out "$OUT/${size}_${side}_$round.json" \
        >/dev/null 2>"$OUT/${size}_${side}_$round.err") || echo "   failed: $OUT/${size}_${side}_$round.err"
    done
  done
done
if [ -n "$VLLM_PY" ]; then
  for size in big main; do
    case $size in main) ARGS=$MAIN ;; big) ARGS=$BIG ;; esac
    echo "== vllm venv, $size, --backend hf,vllm: load $(cut -d' ' -f1-3 /proc/loadavg)"
    # shellcheck disable=SC2086
    (cd "$HERE" && PYTHONPATH="$HERE" "$VLLM_PY" -m zoo.cli bench $ARGS --backend hf,vllm --json \
      --out "$OUT/${size}_vllm.json" >/dev/null 2>"$OUT/${size}_vllm.err") || echo "   failed: $OUT/${size}_vllm.err"
  done
fi
echo "done $(date -u +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg); results in $OUT"
