#!/usr/bin/env bash
# A session's closing GPU round in one device call (run from the repository root with the build
# prefix in .carry/prefix and the diffusers wheel in .whl/, as bench/round_common.sh says):
#  1. build-gpu/ for sm_90a (gl-gpu-tests, bench_step, sdtrain, gl-make-demo) while nvcc builds
#     bench/gemm_check.cu beside it;
#  2. the GPU suite, then gemm_check's correctness and speed table (no per-tile sweep);
#  3. bench_step's table (batch 1 / 8, recompute none / blocks) and a batch-8 per-node profile;
#  4. the one-GPU data-parallel check: sdtrain on the demo assets, 2 ranks x batch 4 over the tcp
#     communicator (both ranks on GPU 0) against 1 process x batch 8, the two LoRAs compared;
#  5. with TXT2IMG=1, bench_txt2img's 512² figure on the full-size random-weight model.
# Logs go to $OUT; the summary lines to stdout.
set -uo pipefail
source bench/round_common.sh >/dev/null 2>&1 || { echo "round_common.sh failed"; exit 1; }
export LD_LIBRARY_PATH="/usr/local/cuda/lib:/usr/local/cuda/lib64:$LD_LIBRARY_PATH"
configure_gpu_build >"$OUT/cfg.log" 2>&1 || { tail -20 "$OUT/cfg.log"; exit 1; }
extra_targets=""
[ "${TXT2IMG:-0}" = 1 ] && extra_targets="bench_txt2img"
(ninja -C build-gpu -j14 gl-gpu-tests bench_step gl-sdtrain gl-make-demo $extra_targets >"$OUT/build.log" 2>&1
 echo "ninja rc=$?" >>"$OUT/build.log") &
nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -I. bench/gemm_check.cu -lcublas -o /tmp/gemm_check \
  >"$OUT/gc_build.log" 2>&1 || tail -20 "$OUT/gc_build.log"
wait
tail -1 "$OUT/build.log"
grep -q "ninja rc=0" "$OUT/build.log" || { grep -E "error|FAILED" "$OUT/build.log" | head -30; exit 1; }
stamp built

timeout 300 ./build-gpu/gl-gpu-tests >"$OUT/gpu_tests.log" 2>&1
echo "gpu suite rc=$?"; tail -3 "$OUT/gpu_tests.log"; grep -E "ERROR|FAILED" "$OUT/gpu_tests.log" | head -20
timeout 90 stdbuf -oL /tmp/gemm_check --no-sweep >"$OUT/gemm_check.log" 2>&1
echo "gemm_check rc=$?"; grep -E "WRONG|FAIL|ERROR" "$OUT/gemm_check.log" | head; grep PERF "$OUT/gemm_check.log"
tail -1 "$OUT/gemm_check.log"
stamp tested

timeout 200 ./build-gpu/bench_step --batch 1,8 --recompute none,blocks >"$OUT/step.log" 2>&1
grep -E "RESULT|^work|beside" "$OUT/step.log"
timeout 100 ./build-gpu/bench_step --batch 8 --recompute none --profile 3 >"$OUT/profile.log" 2>&1
sed -n '/by op/,/slowest/p' "$OUT/profile.log" | head -40
stamp benched

demo=/tmp/demo
./build-gpu/gl-make-demo "$demo" >"$OUT/demo.log" 2>&1 || { tail -5 "$OUT/demo.log"; exit 1; }
common=(--pretrained_model_name_or_path "$demo/model" --train_data_dir "$demo/dataset" --caption_extension .txt
  --resolution 128 --enable_bucket --min_bucket_reso 64 --max_bucket_reso 256 --bucket_reso_steps 32 --cache_latents
  --network_module networks.lora --network_dim 16 --max_train_steps 50 --learning_rate 1e-3 --seed 1
  --mixed_precision bf16)
timeout 150 ./build-gpu/sdtrain "${common[@]}" --train_batch_size 4 --num_processes 2 --dist_backend tcp --gpus 0 \
  --output_dir "$demo/dp2" >"$OUT/dp2.log" 2>&1
echo "2 ranks x 4 rc=$?"; grep -E "effective|images/s|error" "$OUT/dp2.log" | tail -4
timeout 150 ./build-gpu/sdtrain "${common[@]}" --train_batch_size 8 --output_dir "$demo/dp1" >"$OUT/dp1.log" 2>&1
echo "1 x 8 rc=$?"; grep -E "effective|images/s|error" "$OUT/dp1.log" | tail -4
python3 - "$demo/dp2" "$demo/dp1" <<'EOF'
import glob, sys
from safetensors.torch import load_file
def lora(d):
    f = sorted(glob.glob(d + "/*.safetensors"))
    return load_file(f[-1]) if f else None
a, b = lora(sys.argv[1]), lora(sys.argv[2])
if a is None or b is None:
    sys.exit("dp compare: a LoRA file is missing")
worst = max((float((a[k].double() - b[k].double()).abs().max() / (b[k].double().abs().max() + 1e-30)), k)
            for k in b if k in a and b[k].is_floating_point())
print(f"dp compare: {len(b)} tensors, same keys {set(a) == set(b)}, worst max|diff|/max|w| {worst[0]:.3e} ({worst[1]})")
EOF
stamp "dp checked"

# 5. (TXT2IMG=1) txt2img speed, ours only: the full-size random-weight SD1.5 made by
#    tests/golden/make_fullsize.py, 512², 20 Euler steps, CFG 7.5, VAE decode included.
if [ "${TXT2IMG:-0}" = 1 ]; then
  python3 tests/golden/make_fullsize.py --out "$MODEL_DIR" >"$OUT/make_fullsize.log" 2>&1 || tail -5 "$OUT/make_fullsize.log"
  timeout 150 ./build-gpu/bench_txt2img "$MODEL_DIR/diffusers" --size 512 --steps 20 --cfg 7.5 --sampler euler --batch 1 \
    --runs 5 >"$OUT/txt2img.jsonl" 2>"$OUT/txt2img.log"
  echo "txt2img rc=$?"; cat "$OUT/txt2img.jsonl"; tail -3 "$OUT/txt2img.log"
fi
stamp done
