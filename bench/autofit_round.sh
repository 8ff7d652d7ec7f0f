#!/usr/bin/env bash
# sdtrain under --vram_limit on the GPU machine, as a kohya user meets it: full-size SD1.5 with random
# weights as a single file (tests/golden/make_fullsize.py), a kohya folder shaped like a real one
# (bench/make_kohya_folder.py: 14 aspect buckets, subsets with 10 and 3 repeats, a regularisation
# folder, JPEG / RGBA / grey / 16-bit PNG, a damaged JPEG), rank 16, UNet only, AdamW, batch 8, bf16,
# latents cached, the text encoder run each step, $STEPS steps; each run's plan, start-up to the
# first step, its peak device memory (nvidia-smi, every 100 ms) against the prediction:
#   none   no limit (the start-up to compare with)
#   8G     --vram_limit 8G (the command that was refused)      6G: --vram_limit 6G (recompute)
#   NETWORKS=1: LoHa, LoKr and DoRA (lycoris.kohya, preset attn-mlp) beside them
#   VARIANTS=1: kohya's noise and loss variants (pyramid noise, input perturbation: noise drawn on the host)
# Then (PHASE=all) the GPU suite and bench_step at batch 1 and 8. Logs in $OUT.
# Usage (device): PHASE=build bash bench/autofit_round.sh; then PHASE=run (or all) in the next call.
source bench/round_common.sh
STEPS="${STEPS:-40}"
DATA_DIR="${DATA_DIR:-/tmp/kohya}"
PHASE="${PHASE:-all}"
nproc_=$(nproc)

if [ "$PHASE" = build ] || [ "$PHASE" = all ]; then
  if [ ! -x build-gpu/sdtrain ] || [ ! -x build-gpu/gl-gpu-tests ]; then
    configure_gpu_build >"$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; die "configure"; }
    ninja -C build-gpu -j"$nproc_" gl-sdtrain gl-gpu-tests bench_step >"$OUT/build.log" 2>&1 \
      || { grep -E "error|FAILED" "$OUT/build.log" | head -40; die "build (see build.log)"; } &
    build_pid=$!
  fi
  [ -f "$MODEL_DIR/sd15.safetensors" ] || python3 tests/golden/make_fullsize.py --out "$MODEL_DIR" \
    >"$OUT/make_fullsize.log" 2>&1 || die "make_fullsize.py (see make_fullsize.log)"
  stamp "model made"
  [ -d "$DATA_DIR/train" ] || python3 bench/make_kohya_folder.py --out "$DATA_DIR" --megapixels 1.5 | tee "$OUT/dataset.log"
  stamp "dataset made"
  [ -z "${build_pid:-}" ] || wait "$build_pid" || die "build"
  stamp "built"
  [ "$PHASE" = build ] && exit 0
fi

run_sdtrain() {  # name, then extra options
  local name=$1
  shift
  local args=(--pretrained_model_name_or_path "$MODEL_DIR/sd15.safetensors" --train_data_dir "$DATA_DIR/train"
              --reg_data_dir "$DATA_DIR/reg" --resolution 512 --enable_bucket --caption_extension .txt
              --output_dir "/tmp/run-$name" --output_name sks --network_module networks.lora --network_dim 16
              --network_alpha 16 --network_train_unet_only --learning_rate 1e-4 --max_train_steps "$STEPS"
              --train_batch_size 8 --mixed_precision bf16 --cache_latents --seed 1 --backend cuda "$@")
  rm -rf "/tmp/run-$name"
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 >"$OUT/$name.smi" 2>/dev/null &
  local smi=$!
  local t=$SECONDS
  ./build-gpu/sdtrain "${args[@]}" >"$OUT/$name.log" 2>&1
  local status=$?
  kill $smi 2>/dev/null
  echo "== $name (exit $status, $((SECONDS - t)) s): nvidia-smi max $(sort -n "$OUT/$name.smi" | tail -1) MiB"
  grep -E "configuration:|predicted peak|CUDA graphs|auto-fit within|^  \* |skipped:|start-up|^done|device memory|error" \
    "$OUT/$name.log" | head -14
}

if [ "$PHASE" = run ] || [ "$PHASE" = all ]; then
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | sed 's/^/idle device memory MiB: /'
  run_sdtrain none
  run_sdtrain 8G --vram_limit 8G
  run_sdtrain 6G --vram_limit 6G
  if [ -n "${NETWORKS:-}" ]; then  # the LyCORIS types at full size (issue 21)
    run_sdtrain loha --network_module lycoris.kohya --network_args algo=loha preset=attn-mlp
    run_sdtrain lokr --network_module lycoris.kohya --network_args algo=lokr factor=8 preset=attn-mlp
    run_sdtrain dora --network_module lycoris.kohya --network_args algo=lora dora_wd=True preset=attn-mlp
  fi
  if [ -n "${VARIANTS:-}" ]; then  # kohya's noise and loss variants (issue 23): host-drawn noise
    run_sdtrain variants --multires_noise_iterations 6 --multires_noise_discount 0.3 --ip_noise_gamma 0.05 \
      --min_snr_gamma 5 --loss_type smooth_l1 --zero_terminal_snr
  fi
  stamp "sdtrain runs"
  timeout 300 ./build-gpu/gl-gpu-tests >"$OUT/gpu-tests.log" 2>&1
  echo "gpu tests exit $?: $(grep -E "test cases:" "$OUT/gpu-tests.log")"
  grep -E "ERROR|FAILED" "$OUT/gpu-tests.log" | head -20
  stamp "gpu tests"
  timeout 200 ./build-gpu/bench_step --batch 1,8 --recompute none,blocks >"$OUT/bench_step.log" 2>&1
  grep -E "^RESULT" "$OUT/bench_step.log"
  stamp "bench_step"
fi
