#!/usr/bin/env bash
# sdtrain's full-size run on the GPU machine, in one call: SD1.5 with random weights as an original
# single file (tests/golden/make_fullsize.py; kept in $MODEL_DIR between calls), a generated kohya
# dataset of $IMAGES images in three 512² aspect buckets (bench/make_sdtrain_dataset.py), sdtrain
# built for sm_90a, then:
#   1. sdtrain --dry_run: the plan (dataset, steps arithmetic, memory by category);
#   2. the run: $STEPS steps at 512² with bucketing, latent caching, sampling every 100 steps and
#      saves every 100 steps with states (LoRA rank 16, UNet only, cached text-encoder outputs,
#      bf16, AdamW, batch $BATCH), its log with images/s, start-up time to the first step, host
#      memory, and the predicted peak beside the measured device use;
#   3. the PyTorch anchor (diffusers UNet + peft LoRA rank 16, bf16 autocast, SDPA, fused AdamW,
#      frozen text encoder) at the same batch and 512², for images/s: $ANCHOR (the lead's
#      shared/anchors/torch_sd15_lora.py; skipped when absent).
# EXTRA: more sdtrain options for both runs (e.g. EXTRA="--vram_limit 6G" to check the limit).
# Logs go to $OUT. Usage (device): bash bench/sdtrain_round.sh    exit status: 0 when the run finished
# Build dependencies the device image lacks (doctest) come from .carry/prefix, as in device_round.sh;
# diffusers comes from .whl/ (as fullsize_round.sh) when the model must be made.
set -euo pipefail
OUT="${OUT:-/tmp/out}"
MODEL_DIR="${MODEL_DIR:-/tmp/sd15full}"
DATA_DIR="${DATA_DIR:-/tmp/sdtrain_data}"
IMAGES="${IMAGES:-120}"
STEPS="${STEPS:-300}"
BATCH="${BATCH:-4}"
read -r -a extra <<<"${EXTRA:-}"
ANCHOR="${ANCHOR:-shared/anchors/torch_sd15_lora.py}"
mkdir -p "$OUT"
prefix="$PWD/.carry/prefix"
export LD_LIBRARY_PATH="$prefix/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
export PYTHONUNBUFFERED=1
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
die() { echo "FAILED: $*" >&2; exit 1; }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
if compgen -G ".whl/diffusers-*.whl" >/dev/null; then
  rm -rf /tmp/site
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || die "pip install of .whl/"
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi

# A prebuilt build-gpu/sdtrain (built for sm_90a elsewhere and carried) skips the build.
build_pid=""
if [ ! -x build-gpu/sdtrain ]; then
  (
    cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DGL_CUDA=ON -DGL_CUDA_ARCHS=90a \
      -DCMAKE_PREFIX_PATH="$prefix" -DGL_DOCTEST_INCLUDE_DIR="$prefix/include" \
      && ninja -C build-gpu gl-sdtrain
  ) >"$OUT/build.log" 2>&1 &
  build_pid=$!
fi

if [ ! -f "$MODEL_DIR/sd15.safetensors" ]; then
  python3 tests/golden/make_fullsize.py --out "$MODEL_DIR" >"$OUT/make_fullsize.log" 2>&1 \
    || { [ -n "$build_pid" ] && kill "$build_pid" 2>/dev/null; die "make_fullsize.py (see make_fullsize.log)"; }
  stamp "model made"
fi
rm -rf "$DATA_DIR"
python3 bench/make_sdtrain_dataset.py --out "$DATA_DIR" --images "$IMAGES" | tee "$OUT/dataset.log"
cat >"$OUT/prompts.txt" <<'EOF'
sks, red and blue gradient, yellow circle --w 512 --h 512 --s 20 --d 1 --l 7
sks, green and white gradient, purple bar --w 576 --h 448 --s 20 --d 2 --l 7 --ss euler_a
EOF
stamp "dataset made"
[ -z "$build_pid" ] || wait "$build_pid" || { grep -E "error|FAILED" "$OUT/build.log" | head -40; die "build (see build.log)"; }
stamp "sdtrain built"

args=(--pretrained_model_name_or_path "$MODEL_DIR/sd15.safetensors" --train_data_dir "$DATA_DIR"
      --resolution 512 --enable_bucket --caption_extension .txt --output_dir "$OUT/run" --output_name sks
      --network_module networks.lora --network_dim 16 --network_alpha 16 --network_train_unet_only
      --learning_rate 1e-4 --max_train_steps "$STEPS" --train_batch_size "$BATCH" --mixed_precision bf16
      --cache_latents --cache_text_encoder_outputs --seed 1 --save_every_n_steps 100 --save_state
      --sample_prompts "$OUT/prompts.txt" --sample_every_n_steps 100 --sample_sampler ddim --backend cuda
      ${extra[@]+"${extra[@]}"})
./build-gpu/sdtrain "${args[@]}" --dry_run >"$OUT/dry_run.log" 2>&1 || { cat "$OUT/dry_run.log"; die "dry run"; }
sed -n '/^dataset/,/^note\|^hashing/p' "$OUT/dry_run.log"
stamp "dry run"
status=0
timer=()
[ -x /usr/bin/time ] && timer=(/usr/bin/time -v -o "$OUT/run.time")
smi_pid=""
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 >"$OUT/run.smi" 2>/dev/null &
  smi_pid=$!
fi
"${timer[@]}" ./build-gpu/sdtrain "${args[@]}" >"$OUT/run.log" 2>&1 || status=$?
[ -n "$smi_pid" ] && kill "$smi_pid" 2>/dev/null
[ -s "$OUT/run.smi" ] && echo "nvidia-smi: device memory used at most $(sort -n "$OUT/run.smi" | tail -1) MiB during the run (all processes)"
stamp "sdtrain exit $status"
# Not a terminal: sdtrain prints a progress line every 10 s (and the first and last steps).
grep -E "^step |^saved|^done|^host memory|^device memory|predicted peak|error" "$OUT/run.log" || true
grep -E "Maximum resident|Elapsed" "$OUT/run.time" 2>/dev/null || true
ls -la "$OUT/run" "$OUT/run/sample" 2>/dev/null | head -40

if [ -f "$ANCHOR" ]; then
  python3 - "$ANCHOR" "$BATCH" >"$OUT/anchor.log" 2>&1 <<'EOF' || echo "anchor failed (see anchor.log)"
import importlib.util, sys
spec = importlib.util.spec_from_file_location("anchor", sys.argv[1])
a = importlib.util.module_from_spec(spec)
spec.loader.exec_module(a)
unet, params = a.build(16)
a.train_bench(unet, params, int(sys.argv[2]), 512, False, steps=20, warm=5)
EOF
  cat "$OUT/anchor.log"
  stamp "anchor"
else
  echo "no PyTorch anchor at $ANCHOR (set ANCHOR=...)"
fi
exit $status
