#!/usr/bin/env python3
"""Golden data for tests/test_sampler.cpp (diffusers' schedulers driven by a fixed fake model) and
tests/test_pipeline.cpp (StableDiffusionPipeline on tiny models).

Part 1, schedulers.safetensors:

Each case builds one diffusers scheduler the way a user gets it, then runs the loop
StableDiffusionPipeline runs (latents * init_noise_sigma; per timestep: scale_model_input, the
model, step) with a deterministic fake model in place of the UNet:
    model(x, t) = tanh(x) * (0.8 + 0.2 * cos(t / 150)) + 0.05 * sin(3 x)      (float64, then f32)
and records the latents after every step() call (fp32, CPU).
Two presets, as diffusion::SamplerOptions has them:
  diffusers  the class built from SD1.5's scheduler_config.json (PNDMScheduler's config: steps_offset
             1, set_alpha_to_one false, clip_sample false, skip_prk_steps), as
             StableDiffusionPipeline users swap it in with Scheduler.from_config(pipe.scheduler.config);
  kohya      what kohya sd-scripts' get_my_scheduler builds for --sample_sampler (constructor
             defaults beside the betas, so PNDM runs its Runge-Kutta steps; DPM's algorithm_type
             from the name, and clip_sample forced on through the config attribute, which DDIM,
             Heun and DDPM then read).
DPM-Solver's "dpmsolver" algorithm gets final_sigmas_type "sigma_min" in both presets: diffusers
0.32.1 refuses it with the default "zero".
Noise of the ancestral / eta > 0 / DDPM steps is drawn here (seeded), one row per model call, and
injected into the scheduler (DDIM's variance_noise; randn_tensor patched in the Euler ancestral,
DPM2 ancestral and DDPM modules to return the row of the current call), so the C++ side can
replay it.

Writes tests/golden/data/sampler/schedulers.safetensors: per case "<name>.x0" [N] (unit noise
before init_noise_sigma), "<name>.noise" [calls, N] (only where used), "<name>.timesteps"
[calls] (f64), "<name>.latents" [calls, N], and for LMS "<name>.sigmas" (f64 of the f32 schedule)
and "<name>.lms_coeffs" [calls, 4] (f64: the coefficients diffusers integrates with scipy at each
step, zero-padded); metadata "cases" (JSON: name, kind, preset, steps, karras, eta, prediction,
init_noise_sigma).

Part 2, the pipeline on tiny models (fp32, CPU): the tiny UNet of tests/golden/data/unet/ and VAE of
tests/golden/data/vae/, the tiny tokenizer of tests/golden/data/tokenizer/tiny, and a tiny CLIP text
encoder made here (width 16 = the UNet's cross-attention width; text_encoder.safetensors, f16
values). StableDiffusionPipeline runs with injected latents (unit noise, which the pipeline scales
by init_noise_sigma) and output_type "np" (images in [0, 1] before quantisation); two random kohya
LoRA files (lora_a: UNet + text encoder, rank 4, alpha 2; lora_b: UNet only with LoCon convs, rank
2 / conv rank 2) are applied with diffusers' load_lora_weights + set_adapters at the multipliers
stored. pipeline.safetensors: per case "<name>.noise" [B, h, w, 4] (NHWC), "<name>.latents"
(final, NHWC), "<name>.image" [B, H, W, 3]; plus "tiled.z" / "tiled.image" for AutoencoderKL's
tiled_decode with 4-latent tiles, and "unet_odd.*" (x, t, context, eps) for the UNet at 7 x 5 latents. Metadata "pipeline_cases": JSON (prompt, negative, size, steps,
cfg, sampler, clip_skip (kohya numbering), loras).

Run with the golden venv (torch, diffusers, transformers, peft; scipy for LMS):
    ~/venv-golden/bin/python tests/golden/make_sampler_golden.py [schedulers] [pipeline]
(both parts when none is named).
Deterministic (seeded, CPU).
"""
import json
import pathlib
import sys

import torch
import diffusers.schedulers.scheduling_ddpm as ddpm_module
import diffusers.schedulers.scheduling_euler_ancestral_discrete as euler_a_module
import diffusers.schedulers.scheduling_k_dpm_2_ancestral_discrete as dpm2_a_module
from diffusers import (DDIMScheduler, DDPMScheduler, DPMSolverMultistepScheduler, DPMSolverSinglestepScheduler,
                       EulerAncestralDiscreteScheduler, EulerDiscreteScheduler, HeunDiscreteScheduler,
                       KDPM2AncestralDiscreteScheduler, KDPM2DiscreteScheduler, LMSDiscreteScheduler, PNDMScheduler)
from safetensors.torch import save_file

OUT = pathlib.Path(__file__).resolve().parent / "data" / "sampler"

# SD1.5's scheduler/scheduler_config.json.
SD15_SCHEDULER_CONFIG = {
    "_class_name": "PNDMScheduler", "beta_end": 0.012, "beta_schedule": "scaled_linear", "beta_start": 0.00085,
    "num_train_timesteps": 1000, "set_alpha_to_one": False, "skip_prk_steps": True, "steps_offset": 1,
    "trained_betas": None, "clip_sample": False,
}

CLASSES = {"ddim": DDIMScheduler, "euler": EulerDiscreteScheduler, "euler_a": EulerAncestralDiscreteScheduler,
           "dpmsolver++": DPMSolverMultistepScheduler, "heun": HeunDiscreteScheduler, "dpm_2": KDPM2DiscreteScheduler,
           "pndm": PNDMScheduler, "lms": LMSDiscreteScheduler, "dpm_2_a": KDPM2AncestralDiscreteScheduler,
           "dpmsolver": DPMSolverMultistepScheduler, "dpmsingle": DPMSolverSinglestepScheduler, "ddpm": DDPMScheduler}
# The modules whose step() draws its noise with randn_tensor (patched to replay the stored noise).
NOISE_MODULES = {"euler_a": euler_a_module, "dpm_2_a": dpm2_a_module, "ddpm": ddpm_module}

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
    # PNDM: SD's config skips the Runge-Kutta steps (PLMS only); kohya's constructor defaults run them.
    ("pndm", "diffusers", 20, False, 0.0, "epsilon"),
    ("pndm", "diffusers", 2, False, 0.0, "epsilon"),
    ("pndm", "diffusers", 1, False, 0.0, "v_prediction"),
    ("pndm", "kohya", 20, False, 0.0, "epsilon"),
    ("pndm", "kohya", 4, False, 0.0, "v_prediction"),
    ("lms", "diffusers", 20, False, 0.0, "epsilon"),
    ("lms", "diffusers", 15, True, 0.0, "epsilon"),
    ("lms", "kohya", 9, False, 0.0, "v_prediction"),
    ("lms", "diffusers", 2, False, 0.0, "epsilon"),
    ("dpm_2_a", "diffusers", 10, False, 0.0, "epsilon"),
    ("dpm_2_a", "diffusers", 9, True, 0.0, "epsilon"),
    ("dpm_2_a", "kohya", 7, False, 0.0, "v_prediction"),
    # DPM-Solver (noise prediction) runs in diffusers 0.32.1 only with final_sigmas_type sigma_min: last
    # step first order below 15 steps, second order from 15 on.
    ("dpmsolver", "diffusers", 20, False, 0.0, "epsilon"),
    ("dpmsolver", "diffusers", 14, False, 0.0, "epsilon"),
    ("dpmsolver", "kohya", 16, True, 0.0, "epsilon"),
    ("dpmsolver", "kohya", 8, False, 0.0, "v_prediction"),
    ("dpmsolver", "diffusers", 1, False, 0.0, "epsilon"),
    ("dpmsingle", "diffusers", 20, False, 0.0, "epsilon"),
    ("dpmsingle", "diffusers", 9, False, 0.0, "epsilon"),
    ("dpmsingle", "kohya", 12, True, 0.0, "epsilon"),
    ("dpmsingle", "kohya", 7, False, 0.0, "v_prediction"),
    ("dpmsingle", "diffusers", 1, False, 0.0, "epsilon"),
    ("ddpm", "diffusers", 25, False, 0.0, "epsilon"),
    ("ddpm", "kohya", 20, False, 0.0, "epsilon"),
    ("ddpm", "kohya", 10, False, 0.0, "v_prediction"),
]


def make_scheduler(kind, preset, karras, prediction):
    cls = CLASSES[kind]
    extra = {}
    if karras:
        extra["use_karras_sigmas"] = True
    if prediction != "epsilon":
        extra["prediction_type"] = prediction
    if kind == "dpmsolver":
        # diffusers refuses algorithm_type dpmsolver with its default final_sigmas_type "zero" (so
        # kohya's get_my_scheduler raises there); "sigma_min" is the setting it asks for instead.
        extra["algorithm_type"] = "dpmsolver"
        extra["final_sigmas_type"] = "sigma_min"
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


def lms_coefficients(sched, name):
    """LMSDiscreteScheduler's integrated coefficients (scipy.integrate.quad) at every step, order
    min(step + 1, 4) as step() uses them, zero-padded to 4, and the sigmas they integrate over."""
    rows = []
    for i in range(len(sched.timesteps)):
        order = min(i + 1, 4)
        row = [sched.get_lms_coefficient(order, i, j) for j in range(order)]
        rows.append(row + [0.0] * (4 - order))
    return {f"{name}.sigmas": sched.sigmas.to(torch.float64).contiguous(),
            f"{name}.lms_coeffs": torch.tensor(rows, dtype=torch.float64)}


def run_case(index, kind, preset, steps, karras, eta, prediction):
    sched = make_scheduler(kind, preset, karras, prediction)
    sched.set_timesteps(steps)
    gen = torch.Generator().manual_seed(1000 + index)
    x0 = torch.randn(SHAPE, generator=gen, dtype=torch.float32)
    calls = len(sched.timesteps)
    noise = torch.randn((calls,) + SHAPE, generator=gen, dtype=torch.float32)
    uses_noise = kind in NOISE_MODULES or (kind == "ddim" and eta > 0)
    # A step that draws noise gets the stored noise of its model call (diffusers' DPM2 a and DDPM
    # skip the draw in some steps; the C++ side draws every call and uses what the step needs).
    call = [0]
    module = NOISE_MODULES.get(kind)
    original_randn = module.randn_tensor if module else None
    if module:
        module.randn_tensor = lambda shape, **kw: noise[call[0]].clone()
    try:
        x = x0 * sched.init_noise_sigma
        latents = []
        for k, t in enumerate(sched.timesteps):
            call[0] = k
            x_in = sched.scale_model_input(x, t)
            out = fake_model(x_in, t)
            kw = {"eta": eta, "variance_noise": noise[k].clone()} if kind == "ddim" and eta > 0 else {}
            x = sched.step(out, t, x, return_dict=False, **kw)[0]
            latents.append(x.clone())
    finally:
        if module:
            module.randn_tensor = original_randn
    name = f"{kind}.{preset}.{steps}{'.karras' if karras else ''}{f'.eta{eta}' if eta else ''}" \
           f"{'.v' if prediction != 'epsilon' else ''}"
    tensors = {f"{name}.x0": x0.reshape(-1).contiguous(),
               f"{name}.timesteps": sched.timesteps.to(torch.float64).contiguous(),
               f"{name}.latents": torch.stack(latents).reshape(calls, -1).contiguous()}
    if uses_noise:
        tensors[f"{name}.noise"] = noise.reshape(calls, -1).contiguous()
    if kind == "lms":
        tensors.update(lms_coefficients(sched, name))
    meta = dict(name=name, kind=kind, preset=preset, steps=steps, karras=karras, eta=eta, prediction=prediction,
                init_noise_sigma=float(sched.init_noise_sigma))
    return meta, tensors


def make_scheduler_golden():
    metas, tensors = [], {}
    for i, case in enumerate(CASES):
        meta, t = run_case(i, *case)
        metas.append(meta)
        tensors.update(t)
    save_file(tensors, str(OUT / "schedulers.safetensors"), metadata={"cases": json.dumps(metas)})
    print(f"wrote {len(metas)} cases to {OUT / 'schedulers.safetensors'}")


# ---- part 2: the pipeline on tiny models ----

GOLDEN = pathlib.Path(__file__).resolve().parent
TEXT_CONFIG = dict(vocab_size=3514, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                   max_position_embeddings=77, hidden_act="quick_gelu", layer_norm_eps=1e-5, bos_token_id=3512,
                   eos_token_id=3513, pad_token_id=3513)
# (name, prompt, negative, width, height, batch, steps, cfg, sampler, karras, clip_skip, loras)
PIPELINE_CASES = [
    ("euler_cfg", "a red fox in the snow, detailed", "blurry, dark", 24, 16, 2, 8, 7.5, "euler", False, 1, []),
    ("dpm_karras_skip2", "portrait of a knight", "", 16, 16, 1, 9, 5.0, "dpmsolver++", True, 2, []),
    ("ddim_no_cfg", "a lighthouse at dusk", "", 16, 24, 1, 6, 1.0, "ddim", False, 1, []),
    ("lora_two", "a red fox in the snow, detailed", "blurry", 16, 16, 1, 6, 6.0, "euler", False, 1,
     [("lora_a", 0.7), ("lora_b", -0.4)]),
]


def tiny_pipeline(sampler, karras):
    sys.path.insert(0, str(GOLDEN))
    import make_unet_golden
    import make_vae_golden
    from diffusers import AutoencoderKL, StableDiffusionPipeline, UNet2DConditionModel
    from safetensors.torch import load_file
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    unet = UNet2DConditionModel(**make_unet_golden.CONFIG)
    unet.load_state_dict({k: v.float() for k, v in load_file(str(GOLDEN / "data/unet/unet_diffusers.safetensors")).items()})
    vae = make_vae_golden.tiny_vae()
    vae.load_state_dict(load_file(str(GOLDEN / "data/vae/weights_diffusers.safetensors")))
    text = CLIPTextModel(CLIPTextConfig(**TEXT_CONFIG))
    text.load_state_dict({k: v.float() for k, v in load_file(str(OUT / "text_encoder.safetensors")).items()},
                         strict=False)
    if not hasattr(text, "text_model"):
        # transformers 5 flattened CLIPTextModel; diffusers' clip_skip path still reaches for
        # .text_model.final_layer_norm (an alias outside the module tree).
        object.__setattr__(text, "text_model", text)
    tok = CLIPTokenizer.from_pretrained(str(GOLDEN / "data/tokenizer/tiny"))
    tok.model_max_length = 77
    pipe = StableDiffusionPipeline(vae=vae, text_encoder=text, tokenizer=tok, unet=unet,
                                   scheduler=make_scheduler(sampler, "diffusers", karras, "epsilon"),
                                   safety_checker=None, feature_extractor=None, requires_safety_checker=False)
    return pipe.to(torch.float32)


def make_text_encoder(gen):
    sys.path.insert(0, str(GOLDEN))
    import make_unet_golden
    from transformers import CLIPTextConfig, CLIPTextModel
    model = CLIPTextModel(CLIPTextConfig(**TEXT_CONFIG))
    sd = {name: make_unet_golden.random_value(name, p, gen).contiguous()
          for name, p in model.state_dict().items() if "position_ids" not in name}
    save_file(sd, str(OUT / "text_encoder.safetensors"))


def make_lora(pipe, name, gen, rank, alpha, text_encoder, conv_rank=0):
    """A kohya-format LoRA (lora_unet_<path> / lora_te_<path>) over kohya's default targets (every
    Linear and 1x1 conv of the UNet's Transformer2DModels; CLIP attention and MLP linears), and with
    conv_rank the LoCon targets of the ResNets, down- and upsamplers too."""
    tensors = {}

    def add(prefix, path, module, r):
        if isinstance(module, torch.nn.Linear):
            down, up = (r, module.in_features), (module.out_features, r)
        else:
            k = module.kernel_size
            down, up = (r, module.in_channels) + tuple(k), (module.out_channels, r, 1, 1)
        key = prefix + path.replace(".", "_")
        tensors[key + ".lora_down.weight"] = ((torch.rand(down, generator=gen) * 2 - 1) * 0.5).half()
        tensors[key + ".lora_up.weight"] = ((torch.rand(up, generator=gen) * 2 - 1) * 0.5).half()
        tensors[key + ".alpha"] = torch.tensor(float(alpha)).half()

    for path, m in pipe.unet.named_modules():
        in_attn = ".attentions." in path and path.split(".")[0] in ("down_blocks", "mid_block", "up_blocks")
        if in_attn and (isinstance(m, torch.nn.Linear) or (isinstance(m, torch.nn.Conv2d) and m.kernel_size == (1, 1))):
            add("lora_unet_", path, m, rank)
        in_conv_block = any(s in path for s in (".resnets.", ".downsamplers.", ".upsamplers."))
        if conv_rank and in_conv_block and isinstance(m, (torch.nn.Linear, torch.nn.Conv2d)):
            add("lora_unet_", path, m, conv_rank if isinstance(m, torch.nn.Conv2d) and m.kernel_size != (1, 1) else rank)
    if text_encoder:
        for path, m in pipe.text_encoder.named_modules():
            if isinstance(m, torch.nn.Linear) and (".self_attn." in path or ".mlp." in path):
                # kohya names CLIP modules from transformers 4's layout (text_model.encoder...).
                add("lora_te_", path if path.startswith("text_model.") else "text_model." + path, m, rank)
    save_file(tensors, str(OUT / f"{name}.safetensors"))


def lora_for_diffusers(pipe, name):
    """The LoRA's tensors as diffusers can load them here: with transformers 5 (no .text_model in
    CLIPTextModel) diffusers finds no module for kohya's lora_te_text_model_* names, so those lose
    the text_model_ part (the same tensors, only renamed)."""
    from safetensors.torch import load_file
    sd = load_file(str(OUT / f"{name}.safetensors"))
    if hasattr(pipe.text_encoder, "encoder"):
        sd = {k.replace("lora_te_text_model_", "lora_te_"): v for k, v in sd.items()}
    return sd


def count_modules(name):
    from safetensors.torch import load_file
    return sum(1 for k in load_file(str(OUT / f"{name}.safetensors")) if k.endswith(".lora_down.weight"))


def count_lora_layers(pipe, adapter):
    return sum(1 for part in (pipe.unet, pipe.text_encoder) for _, m in part.named_modules()
               if hasattr(m, "lora_A") and adapter in m.lora_A)


def nhwc(t):
    return t.permute(0, 2, 3, 1).contiguous()


def make_pipeline_golden():
    gen = torch.Generator().manual_seed(77)
    make_text_encoder(gen)
    probe = tiny_pipeline("euler", False)
    make_lora(probe, "lora_a", gen, rank=4, alpha=2.0, text_encoder=True)
    make_lora(probe, "lora_b", gen, rank=2, alpha=1.0, text_encoder=False, conv_rank=2)
    tensors, metas = {}, []
    for (name, prompt, negative, w, h, batch, steps, cfg, sampler, karras, clip_skip, loras) in PIPELINE_CASES:
        pipe = tiny_pipeline(sampler, karras)
        if loras:
            for lora_name, _ in loras:
                pipe.load_lora_weights(lora_for_diffusers(pipe, lora_name), adapter_name=lora_name)
                assert count_lora_layers(pipe, lora_name) == count_modules(lora_name), lora_name
            pipe.set_adapters([n for n, _ in loras], adapter_weights=[m for _, m in loras])
        noise = torch.randn((batch, 4, h // 2, w // 2), generator=gen, dtype=torch.float32)
        # diffusers applies clip_skip to the prompt only, not to the negative prompt; kohya's
        # sampler and A1111 apply it to both, as we do: both are encoded here the same way.
        skip = clip_skip - 1 if clip_skip > 1 else None
        with torch.no_grad():
            embeds = pipe.encode_prompt([prompt] * batch, "cpu", 1, False, clip_skip=skip)[0]
            neg_embeds = pipe.encode_prompt([negative] * batch, "cpu", 1, False, clip_skip=skip)[0]
        kw = dict(prompt_embeds=embeds, negative_prompt_embeds=neg_embeds if cfg > 1 else None, height=h, width=w,
                  num_inference_steps=steps, guidance_scale=cfg, latents=noise.clone())
        with torch.no_grad():
            latents = pipe(**kw, output_type="latent").images
            image = pipe(**kw, output_type="np").images
        tensors[f"{name}.noise"] = nhwc(noise)
        tensors[f"{name}.latents"] = nhwc(latents)
        tensors[f"{name}.image"] = torch.from_numpy(image).contiguous()
        metas.append(dict(name=name, prompt=prompt, negative=negative, width=w, height=h, batch=batch, steps=steps,
                          cfg=cfg, sampler=sampler, karras=karras, clip_skip=clip_skip, loras=loras))
    # The UNet at odd latent sides (diffusers forwards the skips' sizes to its upsamplers).
    unet = tiny_pipeline("euler", False).unet
    x = torch.randn((2, 4, 7, 5), generator=gen, dtype=torch.float32)
    t = torch.tensor([811.0, 97.5])
    ctx = torch.randn((2, 77, 16), generator=gen, dtype=torch.float32)
    with torch.no_grad():
        eps = unet(x, t, encoder_hidden_states=ctx).sample
    tensors.update({"unet_odd.x": nhwc(x), "unet_odd.t": t, "unet_odd.context": ctx, "unet_odd.eps": nhwc(eps)})
    # The VAE's tiled decode (4-latent tiles: 3-latent stride, 2-pixel blends) of a 10 x 7 latent.
    vae = tiny_pipeline("euler", False).vae
    vae.tile_latent_min_size, vae.tile_sample_min_size = 4, 8
    z = torch.randn((2, 4, 7, 10), generator=gen, dtype=torch.float32)
    with torch.no_grad():
        img = vae.tiled_decode(z / vae.config.scaling_factor).sample
    tensors["tiled.z"] = nhwc(z)
    tensors["tiled.image"] = nhwc((img / 2 + 0.5).clamp(0, 1))
    save_file(tensors, str(OUT / "pipeline.safetensors"), metadata={"pipeline_cases": json.dumps(metas)})
    print(f"wrote {len(metas)} pipeline cases to {OUT / 'pipeline.safetensors'}")


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    parts = sys.argv[1:] or ["schedulers", "pipeline"]
    if "schedulers" in parts:
        make_scheduler_golden()
    if "pipeline" in parts:
        make_pipeline_golden()


if __name__ == "__main__":
    main()
