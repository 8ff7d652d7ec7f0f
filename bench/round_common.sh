# The prelude of the GPU rounds that run diffusers beside us (fullsize_round.sh, txt2img_round.sh),
# sourced from the repository root: $OUT and $MODEL_DIR (made / defaulted), the libraries of the
# carried build prefix .carry/prefix ($prefix), stamp and die, the GPU's name in $OUT/gpu.txt, and
# the diffusers wheel of .whl/ installed into /tmp/site, with torch (CUDA), diffusers, transformers
# and safetensors checked to import. configure_gpu_build configures build-gpu/ for sm_90a.
OUT="${OUT:-/tmp/out}"
MODEL_DIR="${MODEL_DIR:-/tmp/sd15full}"
mkdir -p "$OUT"
prefix="$PWD/.carry/prefix"
export LD_LIBRARY_PATH="$prefix/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
export PYTHONUNBUFFERED=1
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
die() { echo "FAILED: $*" >&2; exit 1; }
configure_gpu_build() {
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DGL_CUDA=ON -DGL_CUDA_ARCHS=90a \
    -DCMAKE_PREFIX_PATH="$prefix" -DGL_DOCTEST_INCLUDE_DIR="$prefix/include"
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
compgen -G ".whl/diffusers-*.whl" >/dev/null || die "no .whl/diffusers-*.whl (download it as the README says)"
rm -rf /tmp/site
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || die "pip install of .whl/"
export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
python3 -c "import torch, diffusers, transformers, safetensors; assert torch.cuda.is_available()" \
  || die "python: torch with CUDA, diffusers, transformers and safetensors must import"
