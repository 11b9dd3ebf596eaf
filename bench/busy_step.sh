#!/usr/bin/env bash
# Feeds docs/results/performance-threads.md, "Threads on a busy machine".
# One `zoo bench` step before and after a change, idle-ish and beside one CPU-bound process pinned to
# CPU 1. Prints each run's thread line, phase rows and the load average; asserts nothing.
#   git archive 4b8c1d0 | (mkdir -p /tmp/before && tar -x -C /tmp/before)
#   bench/busy_step.sh /tmp/before "$PWD" --model TINY_DIR --prompts 8 --group-size 4 --max-new-tokens 64
set -uo pipefail
BEFORE=$1; AFTER=$2; shift 2
ARGS=("$@")
unset OMP_NUM_THREADS OMP_WAIT_POLICY
export HF_HUB_OFFLINE=1 WANDB_MODE=offline TOKENIZERS_PARALLELISM=false
run() {  # label checkout
  echo "== $1 $(uptime)"
  # cd: `python -m` puts the working directory first on sys.path, so each run imports its own checkout
  (cd "$2" && PYTHONPATH="$2" python -m zoo.cli bench grpo --steps 1 --warmup 1 --ignore-eos --autocast none "${ARGS[@]}") 2>&1 \
    | grep -E "^threads:|torch threads|│ step|│ generate|│ train "
}
for mode in idle busy; do
  HOG=
  if [ "$mode" = busy ]; then taskset -c 1 python -c "while True: pass" & HOG=$!; sleep 1; fi
  run "$mode before" "$BEFORE"
  run "$mode after" "$AFTER"
  if [ -n "$HOG" ]; then kill "$HOG"; wait "$HOG" 2>/dev/null; fi
done
echo "== end $(uptime)"
