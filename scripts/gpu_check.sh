#!/usr/bin/env bash
# One prepared command for a GPU machine (no network needed): what is installed, a small nano world,
# a small policy, a batch of multi-turn rollouts (vLLM when it imports, else HF on the GPU), a few GRPO
# steps of the Trainer, then a table (backend, rollout tokens/s, step time rollout/update, peak GPU
# memory) and JSON in $OUT/gpu_check.json (or ./gpu_check.json, or --out PATH). See scripts/gpu_check.py.
#
#   bash scripts/gpu_check.sh                 # on the GPU machine; exits 2 at once without a CUDA GPU
#   bash scripts/gpu_check.sh --cpu-smoke     # the same code path on the CPU: tiny world/model, 1 step
#   GPU_CHECK_TIMEOUT=300 bash scripts/gpu_check.sh --model smol --steps 2
#
# A `timeout` guard (GPU_CHECK_TIMEOUT seconds, default 570) keeps the whole run under 10 minutes;
# the JSON is rewritten after every phase, so a run it stops still leaves what it measured.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd) || exit 3   # the JSON default stays relative to the caller's cwd

PY=${PYTHON:-}
if [[ -z "$PY" ]]; then
  if [[ -x "$ROOT/.venv/bin/python" ]]; then PY="$ROOT/.venv/bin/python"; else PY=$(command -v python3 || true); fi
fi
if [[ -z "$PY" ]]; then
  echo "gpu_check: no Python found (set PYTHON=/path/to/python)" >&2
  exit 3
fi

export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1} TRANSFORMERS_OFFLINE=${TRANSFORMERS_OFFLINE:-1}
export HF_DATASETS_OFFLINE=${HF_DATASETS_OFFLINE:-1} TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"

LIMIT=${GPU_CHECK_TIMEOUT:-570}
timeout --kill-after=20 "$LIMIT" "$PY" "$ROOT/scripts/gpu_check.py" "$@"
rc=$?
if [[ $rc -eq 124 || $rc -eq 137 ]]; then
  echo "gpu_check: stopped by the ${LIMIT}s timeout guard (GPU_CHECK_TIMEOUT); the JSON holds the phases that finished" >&2
fi
exit $rc
