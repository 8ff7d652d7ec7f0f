#!/usr/bin/env bash
# One round on the GPU machine: build for sm_90a, run the GPU tests, compute-sanitizer over a
# slice of them, the kernel benchmarks and the PyTorch side-by-side. Logs go to $OUT.
# Usage (device): bash bench/device_round.sh [tests|sanitize|bench|adam8bit|ncu|step|all]...
#   adam8bit: the 8-bit AdamW benchmark with fp32 AdamW and copy, beside PyTorch's (compare_torch --only optim)
#   ncu:      Nsight Compute sections for one 8-bit AdamW launch
#   step:     bench_step's table (batch 1 / 8, recompute none / blocks), a per-node profile of batch 1,
#             and bench_load on CUDA
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
targets="gl-gpu-tests gl-tests"
case "$what" in *bench*|*adam8bit*|*all*) targets="$targets bench_kernels gl-demo";; esac
case "$what" in *step*|*all*) targets="$targets bench_step bench_load";; esac
if [ -d .carry/bin ]; then
  # Binaries built elsewhere for this GPU (cmake -DGL_CUDA_ARCHS=90a, Release), carried as
  # .carry/bin/bin.tar.xz: saves the build's device time.
  mkdir -p build-gpu/bench && tar -xJf .carry/bin/bin.tar.xz -C build-gpu || exit 1
  echo "prebuilt: $(ls build-gpu build-gpu/bench | tr '\n' ' ')"
else
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DGL_CUDA=ON -DGL_CUDA_ARCHS=90a \
    -DCMAKE_PREFIX_PATH="$prefix" -DGL_DOCTEST_INCLUDE_DIR="$prefix/include" >"$OUT/configure.log" 2>&1 \
    || { tail -30 "$OUT/configure.log"; exit 1; }
  ninja -C build-gpu $targets >"$OUT/build.log" 2>&1 || { grep -E "error|FAILED" "$OUT/build.log" | head -40; exit 1; }
fi
echo "build: $(( $(date +%s) - t0 )) s"

case "$what" in *tests*|*all*)
  timeout 300 ./build-gpu/gl-gpu-tests 2>&1 | tee "$OUT/gpu-tests.log" | grep -E "ERROR|FAIL|relative error|test cases|assertions" | head -60
  ;;
esac
case "$what" in *sanitize*|*all*)
  # memcheck over the parity suite, the whole-step test and the 8-bit kernels (every variant);
  # racecheck (shared memory) over the same minus the parity suite's many small graphs
  for tool in memcheck racecheck; do
    cases='*UNet-like*,*bit for bit*'
    [ $tool = memcheck ] && cases="$cases,*GPU parity*"
    timeout "${SANITIZE_TIMEOUT:-200}" compute-sanitizer --tool $tool --error-exitcode 9 ./build-gpu/gl-gpu-tests \
      -tc="$cases" >"$OUT/sanitize-$tool.log" 2>&1
    echo "compute-sanitizer $tool: exit $? ($(grep -c 'ERROR SUMMARY' "$OUT/sanitize-$tool.log") summaries)"
    grep -E "ERROR SUMMARY|Invalid|Race|test cases" "$OUT/sanitize-$tool.log" | head -5
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
case "$what" in *adam8bit*)
  ./build-gpu/bench/bench_kernels --benchmark_min_time=0.5 --benchmark_filter='adamw|copy' \
    --benchmark_out=/tmp/adam8bit.json --benchmark_out_format=json 2>&1 | grep -E "^BM_" | tee -a "$OUT/adam8bit.log"
  PYTHONUNBUFFERED=1 python3 bench/compare_torch.py --only optim --ours /tmp/adam8bit.json 2>&1 \
    | grep -E "^BM_|8-bit" | tee -a "$OUT/adam8bit.log"
  ;;
esac
case "$what" in *ncu*)  # Nsight Compute on one 8-bit AdamW launch
  timeout 200 ncu --kernel-name regex:adamw8bit --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
    --section InstructionStats ./build-gpu/bench/bench_kernels --benchmark_filter=adamw8bit \
    --benchmark_min_time=0.001 >"$OUT/ncu-adam8bit.log" 2>&1
  echo "== ncu (exit $?)"
  grep -E "Duration|Throughput|Issue|Occupancy|Registers|Warp Cycles|Executed Ipc|Active Warps|Eligible|Stall|stall" \
    "$OUT/ncu-adam8bit.log" | head -30
  ;;
esac
case "$what" in *step*|*all*)
  ./build-gpu/bench_step --batch 1 --recompute none --profile 2 >"$OUT/step-profile.log" 2>&1 || tail -5 "$OUT/step-profile.log"
  sed -n '/by phase/,$p' "$OUT/step-profile.log" | head -50
  ./build-gpu/bench_step 2>&1 | tee "$OUT/step.log" | tail -12
  ./build-gpu/bench_load --backend cuda 2>&1 | tee "$OUT/load.log" | tail -6
  ;;
esac
echo "total: $(( $(date +%s) - t0 )) s"
