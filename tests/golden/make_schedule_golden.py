#!/usr/bin/env python3
"""Golden data for tests/test_schedule.cpp, tests/test_noise.cpp and tests/test_objective.cpp.

Writes tests/golden/data/schedule/:
  lr.json     learning rates from diffusers.optimization (get_scheduler and, for polynomial with its
              own lr_end, get_polynomial_decay_schedule_with_warmup) driven through a real
              torch LambdaLR: entry k is the lr the optimizer uses at its step k (0-based), read
              with get_last_lr() before the k-th scheduler.step(). Steps run past the total to
              cover the tail behaviour.
  ddpm.json   diffusers' DDPMScheduler with the SD1.5 config (scaled_linear, 0.00085..0.012,
              1000 steps): alphas_cumprod; add_noise and get_velocity on small random f32
              tensors [4, 2, 3, 3] (NCHW; per-sample so the layout does not matter) at t = 0, 1,
              500, 999; min-SNR-gamma weights as kohya's library/custom_train_functions.py
              computes them (all_snr = (sqrt(ac) / sqrt(1 - ac))^2 in f32, then
              min(snr, gamma) / snr for epsilon, min(snr, gamma) / (snr + 1) for v-prediction).
Run with the golden venv: /work/venv-golden/bin/python tests/golden/make_schedule_golden.py
Deterministic (seeded, CPU).
"""
import json
import pathlib

import torch
from diffusers import DDPMScheduler
from diffusers.optimization import get_polynomial_decay_schedule_with_warmup, get_scheduler

OUT = pathlib.Path(__file__).resolve().parent / "data" / "schedule"

BASE_LR = 1e-3
TOTAL = 120
STEPS = TOTAL + 15
# (kind, warmup, num_cycles, power, lr_end or None for get_scheduler's default)
CASES = [
    ("constant", 0, 1, 1.0, None),
    ("constant_with_warmup", 10, 1, 1.0, None),
    ("constant_with_warmup", 0, 1, 1.0, None),
    ("linear", 0, 1, 1.0, None),
    ("linear", 17, 1, 1.0, None),
    ("cosine", 0, 1, 1.0, None),
    ("cosine", 12, 1, 1.0, None),
    ("cosine_with_restarts", 0, 1, 1.0, None),
    ("cosine_with_restarts", 8, 3, 1.0, None),
    ("cosine_with_restarts", 5, 4, 1.0, None),
    ("polynomial", 0, 1, 1.0, None),
    ("polynomial", 10, 1, 2.0, None),
    ("polynomial", 6, 1, 0.5, 1e-5),
]


def lr_trajectory(kind, warmup, cycles, power, lr_end):
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([param], lr=BASE_LR)
    if lr_end is not None:
        sched = get_polynomial_decay_schedule_with_warmup(opt, warmup, TOTAL, lr_end=lr_end, power=power)
    else:
        sched = get_scheduler(kind, opt, num_warmup_steps=warmup, num_training_steps=TOTAL,
                              num_cycles=cycles, power=power)
    lrs = []
    for _ in range(STEPS):
        lrs.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    return lrs


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    cases = []
    for kind, warmup, cycles, power, lr_end in CASES:
        cases.append(dict(kind=kind, base_lr=BASE_LR, warmup_steps=warmup, total_steps=TOTAL,
                          num_cycles=cycles, power=power, lr_end=1e-7 if lr_end is None else lr_end,
                          lr=lr_trajectory(kind, warmup, cycles, power, lr_end)))
    (OUT / "lr.json").write_text(json.dumps(dict(cases=cases)) + "\n")

    sched = DDPMScheduler(num_train_timesteps=1000, beta_start=0.00085, beta_end=0.012,
                          beta_schedule="scaled_linear")
    ac = sched.alphas_cumprod  # f32
    gen = torch.Generator().manual_seed(5)
    x0 = torch.randn(4, 2, 3, 3, generator=gen)
    noise = torch.randn(4, 2, 3, 3, generator=gen)
    t = torch.tensor([0, 1, 500, 999])
    noisy = sched.add_noise(x0, noise, t)
    velocity = sched.get_velocity(x0, noise, t)

    # kohya: prepare_scheduler_for_custom_training + apply_snr_weight, in f32 as there.
    all_snr = (torch.sqrt(ac) / torch.sqrt(1.0 - ac)) ** 2
    snr_ts = [0, 1, 10, 100, 250, 500, 750, 999]
    gammas = [1.0, 5.0, 20.0]
    minsnr = []
    for g in gammas:
        snr = all_snr[snr_ts]
        m = torch.minimum(snr, torch.full_like(snr, g))
        minsnr.append(dict(gamma=g, epsilon=torch.div(m, snr).tolist(), v=torch.div(m, snr + 1).tolist()))

    data = dict(alphas_cumprod=ac.tolist(), shape=list(x0.shape), t=t.tolist(),
                x0=x0.flatten().tolist(), noise=noise.flatten().tolist(), noisy=noisy.flatten().tolist(),
                velocity=velocity.flatten().tolist(), snr_t=snr_ts, snr=all_snr[snr_ts].tolist(),
                min_snr=minsnr)
    (OUT / "ddpm.json").write_text(json.dumps(data) + "\n")


if __name__ == "__main__":
    main()
