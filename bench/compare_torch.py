#!/usr/bin/env python3
"""Side-by-side kernel figures: the SD1.5 shapes of TARGETS.md through PyTorch (cuBLAS,
cuDNN channels-last, SDPA with each backend, fused AdamW), next to ours.

Usage (on the GPU machine, in the same call as the C++ benchmark):
  build-gpu/gl-bench --benchmark_out=ours.json --benchmark_out_format=json
  python3 bench/compare_torch.py --ours ours.json
Prints one table: kernel, shape, ours, PyTorch, ratio (ours / PyTorch).
"""
import argparse
import json

import torch
import torch.nn.functional as F


def bench_ms(fn, warmup=5, reps=30):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def torch_figures(only):
    dev, bf = "cuda", torch.bfloat16
    out = {}
    if only == "all":
        kernel_figures(out, dev, bf)
    optimizer_figures(out, dev)
    return out


def kernel_figures(out, dev, bf):
    for (M, N, K) in [(32768, 320, 320), (32768, 2560, 320), (32768, 320, 1280)]:
        x = torch.randn(M, K, device=dev, dtype=bf)
        w = torch.randn(N, K, device=dev, dtype=bf)
        ms = bench_ms(lambda: F.linear(x, w))
        out[f"BM_linear/{M}/{N}/{K}"] = ("TFLOP/s", 2 * M * N * K / ms * 1e-9, "cuBLAS")
    torch.backends.cudnn.benchmark = True
    for (hw, c) in [(64, 320), (32, 640), (16, 1280), (8, 1280)]:
        x = torch.randn(8, c, hw, hw, device=dev, dtype=bf).to(memory_format=torch.channels_last)
        w = torch.randn(c, c, 3, 3, device=dev, dtype=bf).to(memory_format=torch.channels_last)
        b = torch.randn(c, device=dev, dtype=bf)
        ms = bench_ms(lambda: F.conv2d(x, w, b, padding=1))
        out[f"BM_conv3x3/{hw}/{c}"] = ("TFLOP/s", 2 * 8 * hw * hw * c * 9 * c / ms * 1e-9, "cuDNN NHWC")
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION}
    for (L, S, d) in [(4096, 4096, 40), (1024, 1024, 80), (256, 256, 160), (4096, 77, 40)]:
        q = torch.randn(8, 8, L, d, device=dev, dtype=bf, requires_grad=True)
        k = torch.randn(8, 8, S, d, device=dev, dtype=bf, requires_grad=True)
        v = torch.randn(8, 8, S, d, device=dev, dtype=bf, requires_grad=True)
        go = torch.randn(8, 8, L, d, device=dev, dtype=bf)
        flops_f = 4 * 64 * L * S * d
        best_f, best_fb = (0, "-"), (0, "-")
        for name, be in backends.items():
            try:
                with sdpa_kernel(be):
                    ms_f = bench_ms(lambda: F.scaled_dot_product_attention(q, k, v))
                    ms_fb = bench_ms(lambda: F.scaled_dot_product_attention(q, k, v).backward(go))
                tf, tfb = flops_f / ms_f * 1e-9, 3.5 * flops_f / ms_fb * 1e-9
                print(f"  sdpa {name:9s} L={L} S={S} d={d}: fwd {tf:6.1f}  fwd+bwd {tfb:6.1f} TFLOP/s")
                best_f = max(best_f, (tf, name))
                best_fb = max(best_fb, (tfb, name))
            except Exception as e:  # a backend may not support the shape
                print(f"  sdpa {name:9s} L={L} S={S} d={d}: unsupported ({type(e).__name__})")
        out[f"BM_attention_fwd/{L}/{S}/{d}"] = ("TFLOP/s", best_f[0], f"SDPA {best_f[1]}")
        out[f"BM_attention_fwd_bwd/{L}/{S}/{d}"] = ("TFLOP/s", best_fb[0], f"SDPA {best_fb[1]}")


def optimizer_figures(out, dev):
    n = 256 << 20
    p = torch.nn.Parameter(torch.randn(n, device=dev))
    p.grad = torch.randn(n, device=dev)
    opt = torch.optim.AdamW([p], lr=1e-4, fused=True)
    ms = bench_ms(opt.step)
    out["BM_adamw_fp32"] = ("GB/s", 28 * n / ms * 1e-6, "torch fused AdamW")
    x = torch.randn(n, device=dev)
    y = torch.empty_like(x)
    ms = bench_ms(lambda: y.copy_(x))
    out["BM_copy"] = ("GB/s", 8 * n / ms * 1e-6, "torch copy_")
    out["BM_adamw8bit"] = ("GB/s", None, "(bitsandbytes not on the device)")


def our_figures(path):
    if not path:
        return {}
    with open(path) as f:
        data = json.load(f)
    ours = {}
    for b in data.get("benchmarks", []):
        name = b["name"].replace("/manual_time", "")
        if "TFLOPs" in b:
            ours[name] = b["TFLOPs"]
        elif "GBps" in b:
            ours[name] = b["GBps"]
        elif "error_message" in b:
            ours[name] = None
    return ours


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ours", help="Google Benchmark JSON from gl-bench")
    ap.add_argument("--only", choices=["all", "optim"], default="all",
                    help="optim: only the optimizer and copy rows")
    args = ap.parse_args()
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}")
    theirs = torch_figures(args.only)
    ours = our_figures(args.ours)
    print(f"\n{'kernel':34s} {'unit':8s} {'ours':>9s} {'PyTorch':>9s} {'ratio':>7s}  reference")
    for name, (unit, t, ref) in theirs.items():
        o = ours.get(name)
        os_ = f"{o:9.1f}" if o is not None else f"{'-':>9s}"
        ts = f"{t:9.1f}" if t is not None else f"{'-':>9s}"
        ratio = f"{o / t:7.2f}" if (o is not None and t) else f"{'-':>7s}"
        print(f"{name:34s} {unit:8s} {os_} {ts} {ratio}  {ref}")
    for name, o in ours.items():
        if name not in theirs and o is not None:
            print(f"{name:34s} {'':8s} {o:9.1f} {'-':>9s} {'-':>7s}")
    if ours.get("BM_adamw8bit") and theirs.get("BM_copy"):  # the floor: 70 % of copy bandwidth
        print(f"8-bit AdamW at {100 * ours['BM_adamw8bit'] / theirs['BM_copy'][1]:.1f} % of torch copy_ "
              f"({theirs['BM_copy'][1]:.0f} GB/s)")


if __name__ == "__main__":
    main()
