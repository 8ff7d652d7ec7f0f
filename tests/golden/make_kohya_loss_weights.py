#!/usr/bin/env python3
"""Loss weights made by kohya sd-scripts' own functions, for tests/test_objective.cpp
(tests/golden/data/kohya/loss_weights.json).

Run with the golden venv and an sd-scripts checkout:
  ~/venv-golden/bin/python tests/golden/make_kohya_loss_weights.py --sd-scripts /work/ref/sd-scripts

kohya's DDPMScheduler for SD1.x (train_network.py: scaled_linear, 0.00085..0.012, 1000 steps,
clip_sample=False) prepared by prepare_scheduler_for_custom_training (all_snr in f32), then
library/custom_train_functions.py's apply_debiased_estimation (--debiased_estimation_loss) on a
per-sample loss of ones at every timestep, for epsilon and v-prediction: the weight itself.
sd-scripts is imported as make_kohya_metadata.py imports it (stand-ins for what this venv lacks).
Deterministic.
"""
import argparse
import importlib.util
import json
import os

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "kohya")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sd-scripts", required=True)
    args = ap.parse_args()
    spec = importlib.util.spec_from_file_location(
        "make_kohya_metadata", os.path.join(os.path.dirname(os.path.abspath(__file__)), "make_kohya_metadata.py"))
    metadata_script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(metadata_script)
    metadata_script.load_sd_scripts(os.path.abspath(args.sd_scripts))

    import torch
    from diffusers import DDPMScheduler
    from library import custom_train_functions

    sched = DDPMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                          num_train_timesteps=1000, clip_sample=False)
    custom_train_functions.prepare_scheduler_for_custom_training(sched, torch.device("cpu"))
    t = torch.arange(1000)
    ones = torch.ones(1000)
    debiased = {name: custom_train_functions.apply_debiased_estimation(ones, t, sched, v).tolist()
                for name, v in (("epsilon", False), ("v", True))}
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "loss_weights.json"), "w", encoding="ascii") as f:
        json.dump({"t": t.tolist(), "debiased": debiased}, f)
        f.write("\n")
    print("loss_weights.json written")


if __name__ == "__main__":
    main()
