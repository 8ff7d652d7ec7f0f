#!/usr/bin/env bash
# One round on the GPU machine: build for sm_90a, run the GPU tests, compute-sanitizer over a
# slice of them, the kernel benchmarks and the PyTorch side-by-side. Logs go to $OUT.
# Usage (device): bash bench/device_round.sh [tests|sanitize|bench|all]...
# Build dependencies the device image lacks (doctest, Google Benchmark) come from a prefix
# carried along in .carry/prefix (copied from this machine's Debian packages).
set -uo pipefail
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT"
what="${*:-all}"
prefix="$PWD/.carry/prefix"
export LD_LIBRARY_PATH="$prefix/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
t0=$(date +%s)
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DGL_CUDA=ON -DGL_CUDA_ARCHS=90a \
  -DCMAKE_PREFIX_PATH="$prefix" -DGL_DOCTEST_INCLUDE_DIR="$prefix/include" >"$OUT/configure.log" 2>&1 \
  || { tail -30 "$OUT/configure.log"; exit 1; }
targets="gl-gpu-tests gl-tests"
case "$what" in *bench*|*all*) targets="$targets bench_kernels gl-demo";; esac
ninja -C build-gpu $targets >"$OUT/build.log" 2>&1 || { grep -E "error|FAILED" "$OUT/build.log" | head -40; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"

case "$what" in *tests*|*all*)
  ./build-gpu/gl-gpu-tests 2>&1 | tee "$OUT/gpu-tests.log" | grep -E "ERROR|FAIL|relative error|test cases|assertions" | head -60
  ;;
esac
case "$what" in *sanitize*|*all*)
  for tool in memcheck racecheck; do
    timeout 300 compute-sanitizer --tool $tool --error-exitcode 9 ./build-gpu/gl-gpu-tests \
      -tc='*UNet-like*,*AdamW8bit*' >"$OUT/sanitize-$tool.log" 2>&1
    echo "compute-sanitizer $tool: exit $? ($(grep -c 'ERROR SUMMARY' "$OUT/sanitize-$tool.log") summaries)"
    grep -E "ERROR SUMMARY|Invalid|Race" "$OUT/sanitize-$tool.log" | head -5
  done
  ;;
esac
case "$what" in *bench*|*all*)
  ./build-gpu/bench/bench_kernels --benchmark_out="$OUT/ours.json" --benchmark_out_format=json \
    --benchmark_min_time=0.2 --benchmark_filter="${BENCH_FILTER:-.}" >"$OUT/bench.log" 2>&1 || tail -20 "$OUT/bench.log"
  if [ -z "${BENCH_FILTER:-}" ]; then
    PYTHONUNBUFFERED=1 python3 bench/compare_torch.py --ours "$OUT/ours.json" 2>&1 | tee "$OUT/compare.log"
  else
    grep -E "^BM_" "$OUT/bench.log"
  fi
  ;;
esac
echo "total: $(( $(date +%s) - t0 )) s"
