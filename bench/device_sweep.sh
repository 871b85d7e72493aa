#!/usr/bin/env bash
# One prepared command for a lent GPU machine (16 cores, one H200, no network): the GPU check and a
# batch of bench/learning_round.py recipes side by side, results in $OUT (issue 37 research).
#
#   carried: .whl (agentr1 + the packages the image lacks, cp312 wheels), data/processed, data/index,
#            data/models/sft (a cold start for the GPU check), .lr/<cold start>/model (the CPU recipes' start)
#   GPU lanes: scripts/gpu_check.sh (core 15); cold starts trained on the GPU one after the other (core 14:
#            SFT steps and fresh-world demonstrations; greedy dev/test EM of each)
#   CPU lanes (cores 0-13, 2 threads each): RL recipes from the carried cold start, GPU hidden
# Every lane is cut at SWEEP_S seconds; whatever finished is in $OUT/learning_round.jsonl, the logs in
# $OUT/logs.tgz, the GPU check in $OUT/gpu_check.json and $OUT/gpu_check.log.
set -u
SWEEP_S=${SWEEP_S:-500}
[ -n "${SKIP_INSTALL:-}" ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false \
  PYTHONUNBUFFERED=1 MPLBACKEND=Agg GX_ANALYTICS_ENABLED=false
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" .lr/logs
rm -f bench/results/learning_round.jsonl
command -v taskset >/dev/null || taskset() { shift; "$@"; }
python3 -c "import torch, transformers, agentr1.cli; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'transformers', transformers.__version__)"

DEADLINE=$((SECONDS + SWEEP_S))
left() { echo $((DEADLINE - SECONDS > 1 ? DEADLINE - SECONDS : 1)); }

cpu() {  # cpu LANE NAME ARGS...: one recipe on two cores, no GPU
  local lane=$1 name=$2; shift 2
  CUDA_VISIBLE_DEVICES= timeout "$(left)" taskset -c $((2 * lane)),$((2 * lane + 1)) \
    python3 bench/learning_round.py "$@" --work .lr --threads 2 --test > ".lr/logs/$name.log" 2>&1
}

gpu_check() {
  GPU_CHECK_TIMEOUT=240 taskset -c 15 bash scripts/gpu_check.sh --model sft --out "$OUT/gpu_check.json" > "$OUT/gpu_check.log" 2>&1
}

gpu_lane() {
  for spec in "G_A600 sft.steps=600" "G_A1200 sft.steps=1200" "G_AF900 sft.steps=900 sft.fresh.worlds=12" \
              "G_A1800 sft.steps=1800" "G_F900 sft.steps=900 sft.train_examples=0 sft.fresh.worlds=12"; do
    set -- $spec
    local name=$1; shift
    timeout "$(left)" taskset -c 14 python3 bench/learning_round.py sft "$name" --work .lr --threads 1 --test --set "$@" sft.num_threads=1 \
      > ".lr/logs/$name.log" 2>&1
  done
}

RL="train.questions=fresh rollout.temperature=0.7 train.steps=100 train.dev.every=20 train.filter_groups.enabled=true train.filter_groups.max_rounds=3 train.lr=2e-4 train.clip_high=0.28"
gpu_check &
gpu_lane &
cpu 0 C_dataset rl C_dataset --from A600 --set $RL train.questions=dataset &
cpu 1 C_T1 rl C_T1 --from A600 --set $RL rollout.temperature=1.0 &
cpu 2 C_fast rl C_fast --from A600 --set $RL train.kl.mode=none train.old_logprobs=rollout &
cpu 3 C_g8 rl C_g8 --from A600 --set $RL train.batch_questions=4 train.group_size=8 &
cpu 4 C_ppo rl C_ppo --run ppo --from A600 --set $RL &
cpu 5 C_rloo rl C_rloo --run rloo --from A600 --set $RL &
cpu 6 C_lr3e4 rl C_lr3e4 --from A600 --set $RL train.lr=3e-4 &
wait
cp bench/results/learning_round.jsonl "$OUT/" 2>/dev/null
tar czf "$OUT/logs.tgz" .lr/logs .lr/*/*/curve.csv .lr/*/report/metrics.json 2>/dev/null
echo "sweep done"; ls "$OUT"
