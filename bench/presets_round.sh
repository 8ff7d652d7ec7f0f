#!/usr/bin/env bash
# The verified presets (issue 15) on the GPU machine, in one call, one program at a time (the
# memory figures are the whole device's):
#   1. bench_presets: per card (6, 8, 12, 16, 24 GB, the CUDA context included) and 512² / 768², the
#      largest batch without accumulation that fits, run with the memory limit enforced: predicted
#      against measured peak (cudaMemGetInfo and nvidia-smi), ms/image against the same batch
#      without recompute or limit; kohya's 8 GB preset on our runtime; $OUT/presets.tsv;
#   2. bench/presets_torch.py: PyTorch (diffusers UNet + peft LoRA rank 16, SDPA, gradient
#      checkpointing, AdamW8bit when bitsandbytes imports) at the 512² batches step 1 picked and
#      kohya's preset, side by side with step 1's rows;
#   3. with PROFILE=1, the cost model's calibration: bench_step --profile at batch 8, 512², no
#      recompute (the default model against the profile, the fit, and the fit as pasteable code).
# Neither program reads model files (random weights, drawn in place), so no model is made.
# Binaries already in build-gpu/ (built elsewhere for sm_90a and carried) are used as they are.
# Logs go to $OUT. Usage (device): bash bench/presets_round.sh    exit status: 0 when bench_presets ran
# Knobs: STEPS / WARMUP (per configuration), DEADLINE (s, no new bench_presets run after it),
# TORCH_BUDGET (s, the same for presets_torch.py), PROFILE=1 (step 3; needs build-gpu/bench_step).
# The prelude (bench/round_common.sh) installs the diffusers wheel of .whl/ and the carried prefix.
set -euo pipefail
STEPS="${STEPS:-8}"
WARMUP="${WARMUP:-2}"
DEADLINE="${DEADLINE:-270}"
TORCH_BUDGET="${TORCH_BUDGET:-150}"
source bench/round_common.sh
export OUT
git log --oneline -1 | tee "$OUT/commit.txt" || true
python3 -c "import peft" || die "python: peft must import (presets_torch.py)"

targets=(bench_presets)
[ "${PROFILE:-0}" = 1 ] && targets+=(bench_step)
missing=()
for t in "${targets[@]}"; do [ -x "build-gpu/$t" ] || missing+=("$t"); done
if [ ${#missing[@]} -gt 0 ]; then
  (configure_gpu_build && ninja -C build-gpu "${missing[@]}") >"$OUT/build.log" 2>&1 \
    || { grep -E "error|FAILED" "$OUT/build.log" | head -40; die "build (see build.log)"; }
  stamp "built"
fi

status=0
./build-gpu/bench_presets --backend cuda --steps "$STEPS" --warmup "$WARMUP" --deadline "$DEADLINE" \
  --out "$OUT/presets.tsv" >"$OUT/bench_presets.log" 2>&1 || status=$?
grep -E "^(context|planned|RESULT)|^\|" "$OUT/bench_presets.log" || true
[ $status -eq 0 ] || { tail -20 "$OUT/bench_presets.log"; echo "bench_presets: exit $status"; }
stamp "bench_presets done (exit $status)"

ours=()
[ -s "$OUT/presets.tsv" ] && ours=(--ours "$OUT/presets.tsv")
timeout $((TORCH_BUDGET + 240)) python3 bench/presets_torch.py "${ours[@]}" --size 512 --kohya-sizes 512 \
  --budget "$TORCH_BUDGET" >"$OUT/presets_torch.log" 2>&1 || echo "presets_torch.py: exit $? (see presets_torch.log)"
grep -vE "^\{" "$OUT/presets_torch.log" || true
stamp "presets_torch.py done"

if [ "${PROFILE:-0}" = 1 ]; then
  ./build-gpu/bench_step --batch 8 --recompute none --steps 10 --warmup 3 --profile 5 >"$OUT/profile.log" 2>&1 \
    || echo "bench_step --profile: exit $? (see profile.log)"
  sed -n '/^the default cost model/,$p' "$OUT/profile.log"
  stamp "profile done"
fi
exit $status
