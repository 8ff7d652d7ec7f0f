#!/usr/bin/env python3
"""Golden data for tests/test_sampler.cpp: diffusers' schedulers driven by a fixed fake model.

Each case builds one diffusers scheduler the way a user gets it, then runs the loop
StableDiffusionPipeline runs (latents * init_noise_sigma; per timestep: scale_model_input, the
model, step) with a deterministic fake model in place of the UNet:
    model(x, t) = tanh(x) * (0.8 + 0.2 * cos(t / 150)) + 0.05 * sin(3 x)      (float64, then f32)
and records the latents after every step() call (fp32, CPU).
Two presets, as sd::SamplerOptions has them:
  diffusers  the class built from SD1.5's scheduler_config.json (PNDMScheduler's config: steps_offset
             1, set_alpha_to_one false, clip_sample false), as StableDiffusionPipeline users swap it
             in with Scheduler.from_config(pipe.scheduler.config);
  kohya      what kohya sd-scripts' get_my_scheduler builds for --sample_sampler (constructor
             defaults beside the betas, DPM's algorithm_type from the name, and clip_sample forced
             on through the config attribute, which DDIM and Heun then read).
Noise of the ancestral / eta > 0 steps is drawn here (seeded) and stored, and injected into the
scheduler (DDIM's variance_noise; EulerAncestral's randn_tensor patched), so the C++ side can
replay it.

Writes tests/golden/data/sampler/schedulers.safetensors: per case "<name>.x0" [N] (unit noise
before init_noise_sigma), "<name>.noise" [steps, N] (only where used), "<name>.timesteps"
[calls] (f64), "<name>.latents" [calls, N]; metadata "cases" (JSON: name, kind, preset, steps,
karras, eta, prediction, init_noise_sigma).
Run with the golden venv: /work/venv-golden/bin/python tests/golden/make_sampler_golden.py
Deterministic (seeded, CPU).
"""
import json
import pathlib

import torch
import diffusers.schedulers.scheduling_euler_ancestral_discrete as euler_a_module
from diffusers import (DDIMScheduler, DPMSolverMultistepScheduler, EulerAncestralDiscreteScheduler,
                       EulerDiscreteScheduler, HeunDiscreteScheduler, KDPM2DiscreteScheduler)
from safetensors.torch import save_file

OUT = pathlib.Path(__file__).resolve().parent / "data" / "sampler"

# SD1.5's scheduler/scheduler_config.json.
SD15_SCHEDULER_CONFIG = {
    "_class_name": "PNDMScheduler", "beta_end": 0.012, "beta_schedule": "scaled_linear", "beta_start": 0.00085,
    "num_train_timesteps": 1000, "set_alpha_to_one": False, "skip_prk_steps": True, "steps_offset": 1,
    "trained_betas": None, "clip_sample": False,
}

CLASSES = {"ddim": DDIMScheduler, "euler": EulerDiscreteScheduler, "euler_a": EulerAncestralDiscreteScheduler,
           "dpmsolver++": DPMSolverMultistepScheduler, "heun": HeunDiscreteScheduler, "dpm_2": KDPM2DiscreteScheduler}

SHAPE = (2, 4, 4, 4)  # a batch of two 4x4 latents with 4 channels (the layout does not matter here)

# (kind, preset, steps, karras, eta, prediction)
CASES = [
    ("ddim", "diffusers", 20, False, 0.0, "epsilon"),
    ("ddim", "kohya", 20, False, 0.0, "epsilon"),
    ("ddim", "diffusers", 13, False, 0.6, "epsilon"),
    ("ddim", "kohya", 7, False, 1.0, "v_prediction"),
    ("euler", "diffusers", 20, False, 0.0, "epsilon"),
    ("euler", "kohya", 9, False, 0.0, "epsilon"),
    ("euler", "diffusers", 20, True, 0.0, "epsilon"),
    ("euler", "diffusers", 12, False, 0.0, "v_prediction"),
    ("euler_a", "diffusers", 20, False, 0.0, "epsilon"),
    ("euler_a", "kohya", 11, False, 0.0, "v_prediction"),
    ("dpmsolver++", "diffusers", 20, False, 0.0, "epsilon"),
    ("dpmsolver++", "diffusers", 20, True, 0.0, "epsilon"),
    ("dpmsolver++", "kohya", 10, False, 0.0, "epsilon"),
    ("dpmsolver++", "diffusers", 8, True, 0.0, "v_prediction"),
    ("dpmsolver++", "diffusers", 1, False, 0.0, "epsilon"),
    ("heun", "diffusers", 10, False, 0.0, "epsilon"),
    ("heun", "kohya", 10, False, 0.0, "epsilon"),
    ("heun", "diffusers", 9, True, 0.0, "epsilon"),
    ("dpm_2", "diffusers", 10, False, 0.0, "epsilon"),
    ("dpm_2", "diffusers", 9, True, 0.0, "epsilon"),
    ("dpm_2", "kohya", 6, False, 0.0, "v_prediction"),
]


def make_scheduler(kind, preset, karras, prediction):
    cls = CLASSES[kind]
    extra = {}
    if karras:
        extra["use_karras_sigmas"] = True
    if prediction != "epsilon":
        extra["prediction_type"] = prediction
    if preset == "diffusers":
        return cls.from_config(SD15_SCHEDULER_CONFIG, **extra)
    if kind == "dpmsolver++":
        extra["algorithm_type"] = "dpmsolver++"
    s = cls(num_train_timesteps=1000, beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", **extra)
    # kohya's get_my_scheduler: the attribute set on the (frozen) config object is what step() reads.
    if hasattr(s.config, "clip_sample") and s.config.clip_sample is False:
        s.config.clip_sample = True
    return s


def fake_model(x, t):
    xd = x.double()
    t = float(t)
    out = torch.tanh(xd) * (0.8 + 0.2 * torch.cos(torch.tensor(t / 150.0, dtype=torch.float64))) \
        + 0.05 * torch.sin(3.0 * xd)
    return out.float()


def run_case(index, kind, preset, steps, karras, eta, prediction):
    sched = make_scheduler(kind, preset, karras, prediction)
    sched.set_timesteps(steps)
    gen = torch.Generator().manual_seed(1000 + index)
    x0 = torch.randn(SHAPE, generator=gen, dtype=torch.float32)
    calls = len(sched.timesteps)
    noise = torch.randn((calls,) + SHAPE, generator=gen, dtype=torch.float32)
    uses_noise = kind == "euler_a" or (kind == "ddim" and eta > 0)
    noise_iter = iter(noise)
    original_randn = euler_a_module.randn_tensor
    euler_a_module.randn_tensor = lambda shape, **kw: next(noise_iter).clone()
    try:
        x = x0 * sched.init_noise_sigma
        latents = []
        for k, t in enumerate(sched.timesteps):
            x_in = sched.scale_model_input(x, t)
            out = fake_model(x_in, t)
            kw = {"eta": eta, "variance_noise": noise[k].clone()} if kind == "ddim" and eta > 0 else {}
            x = sched.step(out, t, x, return_dict=False, **kw)[0]
            latents.append(x.clone())
    finally:
        euler_a_module.randn_tensor = original_randn
    name = f"{kind}.{preset}.{steps}{'.karras' if karras else ''}{f'.eta{eta}' if eta else ''}" \
           f"{'.v' if prediction != 'epsilon' else ''}"
    tensors = {f"{name}.x0": x0.reshape(-1).contiguous(),
               f"{name}.timesteps": sched.timesteps.to(torch.float64).contiguous(),
               f"{name}.latents": torch.stack(latents).reshape(calls, -1).contiguous()}
    if uses_noise:
        tensors[f"{name}.noise"] = noise.reshape(calls, -1).contiguous()
    meta = dict(name=name, kind=kind, preset=preset, steps=steps, karras=karras, eta=eta, prediction=prediction,
                init_noise_sigma=float(sched.init_noise_sigma))
    return meta, tensors


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    metas, tensors = [], {}
    for i, case in enumerate(CASES):
        meta, t = run_case(i, *case)
        metas.append(meta)
        tensors.update(t)
    save_file(tensors, str(OUT / "schedulers.safetensors"), metadata={"cases": json.dumps(metas)})
    print(f"wrote {len(metas)} cases to {OUT / 'schedulers.safetensors'}")


if __name__ == "__main__":
    main()
