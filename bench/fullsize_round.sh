#!/usr/bin/env bash
# The full-size SD1.5 check on the GPU machine, in one call: installs the diffusers wheel carried in
# .whl/, makes SD1.5's UNet, CLIP and VAE with random weights in both layouts plus diffusers' fp32
# references (tests/golden/make_fullsize.py, on the GPU), builds gl-sd15check for sm_90a meanwhile,
# then checks the diffusers folder and the single file in bf16 on CUDA, and the single file in f32
# (which should agree with the fp32 reference to ~1e-6). Logs go to $OUT; the models (4.3 GB) stay
# in $MODEL_DIR, outside $OUT.
# Usage (device): bash bench/fullsize_round.sh      exit status: 0 when every check passed
# Build dependencies the device image lacks (doctest) come from .carry/prefix, as in device_round.sh.
set -euo pipefail
OUT="${OUT:-/tmp/out}"
MODEL_DIR="${MODEL_DIR:-/tmp/sd15full}"
mkdir -p "$OUT"
prefix="$PWD/.carry/prefix"
export LD_LIBRARY_PATH="$prefix/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
export PYTHONUNBUFFERED=1
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
die() { echo "FAILED: $*" >&2; exit 1; }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
compgen -G ".whl/diffusers-*.whl" >/dev/null || die "no .whl/diffusers-*.whl (download it as the README says)"
rm -rf /tmp/site
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || die "pip install of .whl/"
export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
python3 -c "import torch, diffusers, transformers, safetensors; assert torch.cuda.is_available()" \
  || die "python: torch with CUDA, diffusers, transformers and safetensors must import"
stamp "diffusers installed"

# The build runs beside the generation (CPU cores vs the GPU and one core).
(
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DGL_CUDA=ON -DGL_CUDA_ARCHS=90a \
    -DCMAKE_PREFIX_PATH="$prefix" -DGL_DOCTEST_INCLUDE_DIR="$prefix/include" \
    && ninja -C build-gpu gl-sd15check
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
