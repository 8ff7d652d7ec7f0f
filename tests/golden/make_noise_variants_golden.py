#!/usr/bin/env python3
"""Noise and loss variants made by kohya sd-scripts' own functions, for tests/test_noise_variants.cpp
(tests/golden/data/kohya/noise_variants.json).

Run with the golden venv and an sd-scripts checkout:
  ~/venv-golden/bin/python tests/golden/make_noise_variants_golden.py --sd-scripts /work/ref/sd-scripts

Our random numbers are our own stream, so every random draw kohya's functions make (torch.randn,
torch.randn_like, torch.rand, torch.randint, random.random) is recorded as it is made; the C++
tests feed those draws to our functions and compare the outputs. Tensors are flat lists in
PyTorch's NCHW order with their shapes. Cases:
  pyramid      custom_train_functions.pyramid_noise_like (--multires_noise_iterations / _discount)
  offset       custom_train_functions.apply_noise_offset (--noise_offset, --adaptive_noise_scale)
  noisy        train_util.get_noise_noisy_latents_and_timesteps with every noise option on
               (--noise_offset_random_strength, --ip_noise_gamma(_random_strength), multires),
               on kohya's scheduler with and without --zero_terminal_snr
  ztsnr        fix_noise_scheduler_betas_for_zero_terminal_snr: betas, alphas_cumprod, and all_snr
               (prepared before the fix, as train_network.get_noise_scheduler does)
  weights      NetworkTrainer.post_process_loss on a loss of ones (min-SNR, --scale_v_pred_loss_like_noise_pred,
               --v_pred_like_loss, --debiased_estimation_loss in kohya's order)
  losses       train_util.conditional_loss (huber, smooth_l1) with per-sample huber_c
  masked       custom_train_functions.apply_masked_loss (a conditioning image's R channel, an alpha mask)
Deterministic (seeded).
"""
import argparse
import importlib.util
import json
import os
import random
import types

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "kohya")


def flat(x):
    # 9 significant digits hold an f32 exactly; doubles keep 17.
    digits = 17 if x.dtype == __import__("torch").float64 else 9
    return [float(f"{v:.{digits}g}") for v in x.detach().double().flatten().tolist()]


def tensor(x):
    return {"shape": list(x.shape), "data": flat(x)}


class Recorder:
    """Wraps torch's and Python's random functions, recording each draw in call order."""

    def __init__(self, torch):
        self.torch = torch
        self.draws = []
        self.saved = {}

    def __enter__(self):
        t = self.torch
        for name in ("randn", "randn_like", "rand", "randint"):
            self.saved[name] = getattr(t, name)
            setattr(t, name, self.wrap(name, self.saved[name]))
        self.saved["random"] = random.random
        random.random = self.wrap_random(random.random)
        return self

    def __exit__(self, *exc):
        for name in ("randn", "randn_like", "rand", "randint"):
            setattr(self.torch, name, self.saved[name])
        random.random = self.saved["random"]

    def wrap(self, name, fn):
        def call(*args, **kwargs):
            x = fn(*args, **kwargs)
            self.draws.append({"fn": name, **tensor(x)})
            return x
        return call

    def wrap_random(self, fn):
        def call():
            x = fn()
            self.draws.append({"fn": "random", "shape": [], "data": [x]})
            return x
        return call


def kohya_scheduler(torch, cf, zero_terminal_snr):
    from diffusers import DDPMScheduler
    s = DDPMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                      num_train_timesteps=1000, clip_sample=False)
    cf.prepare_scheduler_for_custom_training(s, torch.device("cpu"))
    if zero_terminal_snr:
        cf.fix_noise_scheduler_betas_for_zero_terminal_snr(s)
    return s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sd-scripts", required=True)
    args = ap.parse_args()
    spec = importlib.util.spec_from_file_location(
        "make_kohya_metadata", os.path.join(os.path.dirname(os.path.abspath(__file__)), "make_kohya_metadata.py"))
    metadata_script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(metadata_script)
    train_network = metadata_script.load_sd_scripts(os.path.abspath(args.sd_scripts))

    import torch
    from library import custom_train_functions as cf
    from library import train_util

    torch.manual_seed(2301)
    random.seed(2305)
    out = {}

    out["pyramid"] = []
    for shape, iterations, discount in (((2, 4, 8, 8), 6, 0.3), ((1, 4, 12, 8), 3, 0.4), ((2, 3, 5, 7), 10, 0.8)):
        noise = torch.randn(*shape)
        with Recorder(torch) as r:
            y = cf.pyramid_noise_like(noise.clone(), torch.device("cpu"), iterations, discount)
        out["pyramid"].append({"iterations": iterations, "discount": discount, "noise": tensor(noise),
                               "draws": r.draws, "out": tensor(y)})

    out["offset"] = []
    for offset, adaptive in ((0.1, None), (0.1, 0.5), (0.05, -0.3)):
        latents = torch.randn(2, 4, 6, 5) * 0.7 + 0.3
        noise = torch.randn(2, 4, 6, 5)
        with Recorder(torch) as r:
            y = cf.apply_noise_offset(latents, noise.clone(), offset, adaptive)
        out["offset"].append({"offset": offset, "adaptive": adaptive, "latents": tensor(latents),
                              "noise": tensor(noise), "draws": r.draws, "out": tensor(y)})

    out["noisy"] = []
    options = dict(noise_offset=0.1, noise_offset_random_strength=True, adaptive_noise_scale=0.2,
                   multires_noise_iterations=3, multires_noise_discount=0.3, min_timestep=None,
                   max_timestep=None, ip_noise_gamma=0.1, ip_noise_gamma_random_strength=True)
    for ztsnr, overrides in ((False, {}), (True, {}),
                             (False, dict(noise_offset_random_strength=False, ip_noise_gamma_random_strength=False,
                                          multires_noise_iterations=None, adaptive_noise_scale=None))):
        a = types.SimpleNamespace(**{**options, **overrides})
        sched = kohya_scheduler(torch, cf, ztsnr)
        latents = torch.randn(3, 4, 8, 6)
        with Recorder(torch) as r:
            noise, noisy, t = train_util.get_noise_noisy_latents_and_timesteps(a, sched, latents)
        velocity = sched.get_velocity(latents, noise, t)
        out["noisy"].append({"options": vars(a), "zero_terminal_snr": ztsnr, "latents": tensor(latents),
                             "draws": r.draws, "noise": tensor(noise), "noisy": tensor(noisy),
                             "timesteps": t.tolist(), "velocity": tensor(velocity)})

    plain = kohya_scheduler(torch, cf, False)
    fixed = kohya_scheduler(torch, cf, True)
    out["ztsnr"] = {"betas": flat(fixed.betas), "alphas_cumprod": flat(fixed.alphas_cumprod),
                    "all_snr": flat(fixed.all_snr), "plain_betas": flat(plain.betas)}

    trainer = train_network.NetworkTrainer()
    t = torch.tensor([0, 1, 5, 50, 250, 500, 750, 998, 999])
    out["weights"] = {"t": t.tolist(), "cases": []}
    for v in (False, True):
        for gamma in (None, 5.0):
            for scale_v in ((False, True) if v else (False,)):
                for vpl in ((None,) if v else (None, 0.2)):
                    for debiased in (False, True):
                        for ztsnr in (False, True):
                            a = types.SimpleNamespace(min_snr_gamma=gamma, scale_v_pred_loss_like_noise_pred=scale_v,
                                                      v_pred_like_loss=vpl, debiased_estimation_loss=debiased,
                                                      v_parameterization=v)
                            sched = fixed if ztsnr else plain
                            w = trainer.post_process_loss(torch.ones(len(t)), a, t, sched)
                            out["weights"]["cases"].append({**vars(a), "zero_terminal_snr": ztsnr, "weights": flat(w)})

    out["losses"] = []
    pred = torch.randn(3, 4, 4, 3) * 0.5
    target = torch.randn(3, 4, 4, 3) * 0.5
    huber_c = torch.tensor([0.1, 0.5, 1.0])
    for kind in ("huber", "smooth_l1", "l1", "l2"):
        loss = train_util.conditional_loss(pred, target, kind, "none", huber_c if kind in ("huber", "smooth_l1") else None)
        out["losses"].append({"loss_type": kind, "pred": tensor(pred), "target": tensor(target),
                              "huber_c": flat(huber_c), "per_sample": flat(loss.mean(dim=[1, 2, 3]))})

    out["masked"] = []
    loss = torch.rand(2, 4, 3, 2)
    cond = torch.rand(2, 3, 24, 16) * 2 - 1
    alpha = torch.rand(2, 24, 16)
    for name, batch in (("conditioning_images", {"conditioning_images": cond}), ("alpha_masks", {"alpha_masks": alpha})):
        y = cf.apply_masked_loss(loss.clone(), batch)
        out["masked"].append({"source": name, "mask": tensor(batch[name]), "loss": tensor(loss), "out": tensor(y)})

    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "noise_variants.json"), "w", encoding="ascii") as f:
        json.dump(out, f)
        f.write("\n")
    print("noise_variants.json written")


if __name__ == "__main__":
    main()
