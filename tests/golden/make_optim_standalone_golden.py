#!/usr/bin/env python3
"""Golden trajectories for tests/test_optim.cpp of dadaptation's DAdaptSGD, DAdaptAdaGrad and DAdaptAdan,
its experimental DAdaptAdamPreprint (kohya's "DAdaptation") and DAdaptAdanIP, schedulefree's
RAdamScheduleFree, and kohya's SGDNesterov8bit as bitsandbytes runs it on tensors this small (below), on make_optim_golden.py's problem (read from tests/golden/data/optim/problem.safetensors, not rewritten):
two groups "unet" = {w, conv} and "te" = {b}, the gradient at step k g = (p - target) * 0.5 + noise[k] in
f32, clipping by clip_grad_norm_ over every param before the step, 60 steps.

Every step here is elementwise apart from sums over all elements, so the params are run in the layout
the problem file stores them in (conv as ggml-lite's [Cout, kh, kw, Cin]); no layout change is needed.
Writes tests/golden/data/optim/<case>.safetensors in make_optim_golden.py's format (traj.* [60, ...],
d [60]: the d estimate after each step; metadata optimizer_type, optimizer_args, lr_unet, lr_te,
lr_scheduler, warmup, max_grad_norm). RAdamScheduleFree's cases have no d but eval.* [60, ...], the
weights optimizer.eval() would set after each step (lerp(y, z, 1 - 1/beta1), out of place), as
make_optim_schedulefree_golden.py writes them.

Needs only torch, dadaptation and schedulefree (no numpy or safetensors: files are read and written here):
  <golden python> tests/golden/make_optim_standalone_golden.py [case ...]   (no case: every case)
Deterministic (CPU).
"""
import json
import pathlib
import struct
import sys

import torch
from dadaptation import DAdaptAdaGrad, DAdaptAdan, DAdaptSGD
from dadaptation.experimental import DAdaptAdamPreprint, DAdaptAdanIP
from schedulefree import RAdamScheduleFree

OUT = pathlib.Path(__file__).resolve().parent / "data" / "optim"
STEPS = 60
NAMES = ("w", "conv", "b")


def load(path):
    raw = pathlib.Path(path).read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    body = raw[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", name
        lo, hi = info["data_offsets"]
        vals = struct.unpack("<%df" % ((hi - lo) // 4), body[lo:hi])
        out[name] = torch.tensor(vals, dtype=torch.float32).reshape(info["shape"])
    return out


def save(tensors, path, metadata):
    """safetensors with sorted header keys, as make_optim_golden.py's save_file writes them."""
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().to(torch.float32).contiguous()
        data = struct.pack("<%df" % t.numel(), *t.flatten().tolist())
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + b"".join(blobs))


def linear_with_warmup(warmup):
    """diffusers' "linear" schedule: linear warmup, then linear decay to 0 at STEPS."""
    return lambda s: s / max(1, warmup) if s < warmup else max(0.0, (STEPS - s) / max(1, STEPS - warmup))


def run(prob, factory, lr_unet, lr_te, scheduler, warmup, max_norm):
    params = {n: torch.nn.Parameter(prob["init." + n].clone()) for n in NAMES}
    groups = [{"params": [params["w"], params["conv"]], "lr": lr_unet}, {"params": [params["b"]], "lr": lr_te}]
    opt = factory(groups)
    sched = None
    if scheduler == "linear":
        sched = torch.optim.lr_scheduler.LambdaLR(opt, linear_with_warmup(warmup))
    else:
        assert scheduler == "constant" and warmup == 0
    schedule_free = isinstance(opt, RAdamScheduleFree)
    has_d = "d" in opt.param_groups[0]
    if schedule_free:
        opt.train()
    traj, ds, ev = {n: [] for n in NAMES}, [], {n: [] for n in NAMES}
    for k in range(STEPS):
        for n, p in params.items():
            p.grad = (p.detach() - prob["target." + n]) * 0.5 + prob["noise." + n][k]
        if max_norm > 0:
            torch.nn.utils.clip_grad_norm_(list(params.values()), max_norm)
        opt.step()
        if sched is not None:
            sched.step()
        for n, p in params.items():
            traj[n].append(p.detach().clone())
            if schedule_free:
                ev[n].append(torch.lerp(p.detach(), opt.state[p]["z"], 1 - 1 / opt.param_groups[0]["betas"][0]))
        if has_d:
            ds.append(float(opt.param_groups[0]["d"]))
    out = {"traj." + n: torch.stack(v) for n, v in traj.items()}
    if schedule_free:
        out.update({"eval." + n: torch.stack(v) for n, v in ev.items()})
    elif has_d:
        out["d"] = torch.tensor(ds, dtype=torch.float32)
    return out


# (name, optimizer_type, kohya args, factory, lr_unet, lr_te, scheduler, warmup, max_norm)
CASES = [
    ("dadapt_sgd", "DAdaptSGD", [], lambda gr: DAdaptSGD(gr), 1.0, 1.0, "constant", 0, 1.0),
    ("dadapt_sgd_options", "DAdaptSGD", ["momentum=0.9", "weight_decay=0.01", "growth_rate=1.1", "d0=1e-3"],
     lambda gr: DAdaptSGD(gr, momentum=0.9, weight_decay=0.01, growth_rate=1.1, d0=1e-3), 1.0, 1.0, "linear", 0,
     0.0),
    ("dadapt_adagrad", "DAdaptAdaGrad", [], lambda gr: DAdaptAdaGrad(gr), 1.0, 1.0, "constant", 0, 1.0),
    ("dadapt_adagrad_options", "DAdaptAdaGrad", ["momentum=0.5", "weight_decay=0.01", "eps=1e-5", "d0=1e-3"],
     lambda gr: DAdaptAdaGrad(gr, momentum=0.5, weight_decay=0.01, eps=1e-5, d0=1e-3), 0.5, 0.5, "linear", 0, 0.0),
    ("dadapt_adan", "DAdaptAdan", [], lambda gr: DAdaptAdan(gr), 1.0, 1.0, "constant", 0, 1.0),
    ("dadapt_adan_options", "DAdaptAdan",
     ["betas=0.9,0.9,0.95", "weight_decay=0.05", "no_prox=True", "growth_rate=1.1", "eps=1e-6", "d0=1e-4"],
     lambda gr: DAdaptAdan(gr, betas=(0.9, 0.9, 0.95), weight_decay=0.05, no_prox=True, growth_rate=1.1, eps=1e-6,
                           d0=1e-4),
     1.0, 1.0, "linear", 0, 1.0),
    ("dadapt_adam_preprint", "DAdaptation", [], lambda gr: DAdaptAdamPreprint(gr), 1.0, 1.0, "constant", 0, 1.0),
    ("dadapt_adam_preprint_options", "DAdaptAdamPreprint",
     ["betas=(0.9, 0.99)", "weight_decay=0.01", "decouple=True", "growth_rate=1.05", "eps=1e-6", "d0=1e-4"],
     lambda gr: DAdaptAdamPreprint(gr, betas=(0.9, 0.99), weight_decay=0.01, decouple=True, growth_rate=1.05,
                                   eps=1e-6, d0=1e-4), 1.0, 1.0, "linear", 0, 1.0),
    ("dadapt_adam_preprint_coupled", "DAdaptAdamPreprint", ["weight_decay=0.05"],
     lambda gr: DAdaptAdamPreprint(gr, weight_decay=0.05), 0.5, 0.5, "constant", 0, 0.0),
    ("dadapt_adan_ip", "DAdaptAdanIP", [], lambda gr: DAdaptAdanIP(gr), 1.0, 1.0, "constant", 0, 1.0),
    ("dadapt_adan_ip_options", "DAdaptAdanIP",
     ["betas=0.9,0.9,0.95", "weight_decay=0.05", "no_prox=True", "growth_rate=1.1", "eps=1e-6", "d0=1e-4"],
     lambda gr: DAdaptAdanIP(gr, betas=(0.9, 0.9, 0.95), weight_decay=0.05, no_prox=True, growth_rate=1.1, eps=1e-6,
                             d0=1e-4), 1.0, 1.0, "linear", 0, 1.0),
    # bitsandbytes' SGD8bit (kohya's SGDNesterov8bit) keeps tensors under 4096 elements, as all of this
    # problem's are, in 32-bit state, whose MOMENTUM kernel is torch's heavy-ball SGD: nesterov and
    # dampening are taken and never used (bitsandbytes needs a GPU, so its class cannot run here).
    ("sgd_nesterov8bit", "SGDNesterov8bit", ["weight_decay=0.01"],
     lambda gr: torch.optim.SGD(gr, lr=1.0, momentum=0.9, weight_decay=0.01), 1e-2, 5e-3, "constant", 0, 1.0),
    ("sgd_nesterov8bit_momentum", "SGDNesterov8bit", ["momentum=0.5", "dampening=0.3"],
     lambda gr: torch.optim.SGD(gr, lr=1.0, momentum=0.5), 2e-2, 1e-2, "linear", 5, 0.0),
    ("radam_schedulefree", "RAdamScheduleFree", ["weight_decay=0.01"],
     lambda gr: RAdamScheduleFree(gr, weight_decay=0.01), 1e-2, 5e-3, "constant", 0, 1.0),
    ("radam_schedulefree_options", "RAdamScheduleFree",
     ["betas=(0.95, 0.99)", "eps=1e-6", "r=0.5", "weight_lr_power=1.0", "silent_sgd_phase=False"],
     lambda gr: RAdamScheduleFree(gr, betas=(0.95, 0.99), eps=1e-6, r=0.5, weight_lr_power=1.0,
                                  silent_sgd_phase=False), 2e-2, 1e-2, "constant", 0, 0.0),
]


def main():
    prob = load(OUT / "problem.safetensors")
    only = set(sys.argv[1:])
    unknown = only - {c[0] for c in CASES}
    if unknown:
        sys.exit("unknown case(s): " + ", ".join(sorted(unknown)))
    for name, otype, args, factory, lr_unet, lr_te, scheduler, warmup, max_norm in CASES:
        if only and name not in only:
            continue
        tensors = run(prob, factory, lr_unet, lr_te, scheduler, warmup, max_norm)
        meta = {"optimizer_type": otype, "optimizer_args": ";".join(args), "lr_unet": repr(lr_unet),
                "lr_te": repr(lr_te), "lr_scheduler": scheduler, "warmup": str(warmup), "max_grad_norm": repr(max_norm)}
        save(tensors, str(OUT / (name + ".safetensors")), meta)
        print(name, "d after 1, 10, 60 steps:", *(tensors["d"][i].item() for i in (0, 9, -1))) if "d" in tensors else \
            print(name, "moved", max((tensors["traj." + n][-1] - prob["init." + n]).abs().max().item() for n in NAMES))


if __name__ == "__main__":
    main()
