#!/usr/bin/env bash
# Text to image on the GPU machine, in one call: the full-size random-weight SD1.5 (made by
# tests/golden/make_fullsize.py unless $MODEL_DIR already holds it), then
#   1. correctness: diffusers' StableDiffusionPipeline in fp32 and bf16 from injected noise
#      (bench/txt2img_torch.py reference), ours in bf16 from the same noise (bench_txt2img --check,
#      diffusers folder and single file): within 3x diffusers' own bf16 spread;
#   2. speed, side by side: 512 x 512, 20 Euler steps, CFG 7.5 (UNet batch 2), bf16, VAE decode
#      included: ours (bench_txt2img), diffusers eager (SDPA) and diffusers with torch.compile
#      (txt2img_torch.py bench --compile, its compile time reported, bounded by --compile-budget);
#   3. gl-txt2img end to end: a prompt file at 512² and 768², and 1024² with a 512 MiB VAE budget
#      (tiled decode), PNGs in $OUT/images.
# Logs and JSON lines go to $OUT; the models (4.3 GB) stay in $MODEL_DIR, outside $OUT.
# Usage (device): bash bench/txt2img_round.sh       exit status: 0 when the checks passed
# Needs the diffusers wheel in .whl/ and doctest from .carry/prefix: the prelude is bench/round_common.sh.
set -euo pipefail
COMPILE_BUDGET="${COMPILE_BUDGET:-420}"
source bench/round_common.sh
mkdir -p "$OUT/images"
git log --oneline -1 | tee "$OUT/commit.txt"

# Binaries built elsewhere for this GPU and placed in build-gpu/ (as device rounds carry them) are used as they are.
if [ -x build-gpu/bench_txt2img ] && [ -x build-gpu/gl-txt2img ]; then true; else (
  configure_gpu_build && ninja -C build-gpu bench_txt2img gl-txt2img
) >"$OUT/build.log" 2>&1; fi &
build_pid=$!
if [ ! -f "$MODEL_DIR/sd15.safetensors" ]; then
  python3 tests/golden/make_fullsize.py --out "$MODEL_DIR" >"$OUT/make_fullsize.log" 2>&1 \
    || { kill "$build_pid" 2>/dev/null; tail -20 "$OUT/make_fullsize.log"; die "make_fullsize.py"; }
  stamp "model made"
fi
ref="$MODEL_DIR/txt2img_reference.safetensors"
python3 bench/txt2img_torch.py reference --model "$MODEL_DIR/diffusers" --out "$ref" 2>&1 | tee "$OUT/reference.log"
stamp "diffusers reference made"
wait "$build_pid" || { grep -E "error|FAILED" "$OUT/build.log" | head -40; die "build (see build.log)"; }
stamp "built"

status=0
for model in "$MODEL_DIR/diffusers" "$MODEL_DIR/sd15.safetensors"; do
  ./build-gpu/bench_txt2img "$model" --check "$ref" --backend cuda --dtype bf16 2>&1 | tee -a "$OUT/check.log" \
    || status=1
done
stamp "checks done (status $status)"

./build-gpu/bench_txt2img "$MODEL_DIR/diffusers" --size 512 --steps 20 --cfg 7.5 --sampler euler --batch 1 --runs 5 \
  >"$OUT/bench_ours.jsonl" 2>"$OUT/bench_ours.log" || die "bench_txt2img (see bench_ours.log)"
cat "$OUT/bench_ours.jsonl"
stamp "ours timed"
timeout $((COMPILE_BUDGET + 240)) python3 bench/txt2img_torch.py bench --model "$MODEL_DIR/diffusers" --compile \
  --compile-budget "$COMPILE_BUDGET" >"$OUT/bench_torch.jsonl" 2>"$OUT/bench_torch.log" \
  || echo "txt2img_torch.py bench: exit $? (see bench_torch.log)"
cat "$OUT/bench_torch.jsonl"
stamp "diffusers timed"

printf '%s\n' "a castle on a hill at sunset --n blurry --d 1 --s 20" \
  "a portrait --w 512 --h 768 --d 2 --s 20 --ss dpmsolver++_karras" >"$OUT/prompts.txt"
./build-gpu/gl-txt2img "$MODEL_DIR/sd15.safetensors" --prompt-file "$OUT/prompts.txt" --out "$OUT/images" --grid \
  >"$OUT/txt2img.log" 2>&1 || { status=1; echo "gl-txt2img failed (see txt2img.log)"; }
./build-gpu/gl-txt2img "$MODEL_DIR/sd15.safetensors" -p "a wide landscape" -W 1024 -H 1024 --seed 3 --steps 10 \
  --vae-budget 512 --out "$OUT/images" >>"$OUT/txt2img.log" 2>&1 || { status=1; echo "gl-txt2img 1024² failed"; }
grep -E "^\[|s per image|VAE decoder|total  " "$OUT/txt2img.log" | sed 's/^/    /'
stamp "total; $([ $status -eq 0 ] && echo "every check passed" || echo "SOME CHECK FAILED")"
exit $status
