#!/usr/bin/env bash
# The full-size SD1.5 check on the GPU machine, in one call: installs the diffusers wheel carried in
# .whl/, makes SD1.5's UNet, CLIP and VAE with random weights in both layouts plus diffusers' fp32
# references (tests/golden/make_fullsize.py, on the GPU), builds gl-sd15check for sm_90a meanwhile,
# then checks the diffusers folder and the single file in bf16 on CUDA, and the single file in f32
# (which should agree with the fp32 reference to ~1e-6). Logs go to $OUT; the models (4.3 GB) stay
# in $MODEL_DIR, outside $OUT.
# Usage (device): bash bench/fullsize_round.sh      exit status: 0 when every check passed
# Build dependencies the device image lacks (doctest) come from .carry/prefix, as in device_round.sh;
# the prelude (wheel install, $OUT, stamp / die) is bench/round_common.sh.
set -euo pipefail
source bench/round_common.sh
stamp "diffusers installed"

# The build runs beside the generation (CPU cores vs the GPU and one core).
(
  configure_gpu_build && ninja -C build-gpu gl-sd15check
) >"$OUT/build.log" 2>&1 &
build_pid=$!

python3 tests/golden/make_fullsize.py --out "$MODEL_DIR" 2>&1 | tee "$OUT/make_fullsize.log" \
  || { kill "$build_pid" 2>/dev/null; die "make_fullsize.py (see make_fullsize.log)"; }
stamp "model and references made"
wait "$build_pid" || { grep -E "error|FAILED" "$OUT/build.log" | head -40; die "build (see build.log)"; }
stamp "gl-sd15check built"

ref="$MODEL_DIR/reference.safetensors"
status=0
check() {  # log name, then gl-sd15check's arguments
  local log="$OUT/$1"
  shift
  local rc=0
  ./build-gpu/gl-sd15check "$@" >"$log" 2>&1 || rc=$?
  stamp "gl-sd15check $* -> exit $rc"
  grep -E "^(==|open|load|forward|memory|tokenizer|runs)|cudaMemGetInfo|device in use|error" "$log" | sed 's/^/    /' || true
  sed -n '/^summary/,$p' "$log"
  [ "$rc" -eq 0 ] || status=1
}
check check-diffusers-bf16.log "$MODEL_DIR/diffusers" "$ref" --backend cuda --dtype bf16
check check-single-file-bf16.log "$MODEL_DIR/sd15.safetensors" "$ref" --backend cuda --dtype bf16
check check-single-file-f32.log "$MODEL_DIR/sd15.safetensors" "$ref" --backend cuda --dtype f32 --runs 2
stamp "total; $([ $status -eq 0 ] && echo "every check passed" || echo "SOME CHECK FAILED")"
exit $status
