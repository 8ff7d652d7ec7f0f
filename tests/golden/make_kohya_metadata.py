#!/usr/bin/env python3
"""The metadata kohya sd-scripts writes into a LoRA file, made by sd-scripts' own code, for
tests/test_kohya_run_metadata.cpp (tests/golden/data/kohya/).

Run with the golden venv and an sd-scripts checkout:
  ~/venv-golden/bin/python tests/golden/make_kohya_metadata.py --sd-scripts /work/ref/sd-scripts

1. run_metadata.json: per case a small run (a command line of train_network.py, the files of its
   dataset: image sizes and caption files, a deterministic model file) and every key of the file
   train_network.py would save at the end of it. The run is made by kohya's code as far as it goes
   without a GPU or a model: train_network.setup_parser() parses the command line,
   prepare_dataset_args fixes it up, config_util's blueprint builds the DreamBoothDataset over real
   image files in a scratch folder (its BucketManager, reg balancing, tag frequency), get_optimizer
   names the optimizer, and the metadata is the code of NetworkTrainer.train itself: its statements
   from `metadata = {` to `metadata = {k: str(v) ...}` taken from train_network.py's source and run
   with the values train() would have at that point; then save_model's three per-save keys and
   get_sai_model_spec's modelspec.* keys. Run-specific values (session id, times, the two commit
   keys) are written as kohya makes them and excluded by name in the test. The finetune_* cases
   are kohya's fine-tuning metadata (--in_json, metadata_file): config_util builds its
   FineTuningDataset (with the SD latent caching strategy train() sets first), and the case also
   keeps each fine-tuning image as kohya lists it (key, path, caption, repeats, bucket) for
   tests/test_data_fine_tuning.cpp. The folder cases have one
   training folder each: kohya orders folders as the file system lists them (Path.iterdir), so
   several subsets are given through a dataset config, which orders them.
2. py_float.txt: Python's repr() of about 3000 doubles (str() of a float is its repr: what kohya's
   str(v) writes), as "<16 hex digits of the bits> <repr>" lines: powers of ten and their
   neighbours across repr's switch to the exponent form (1e-4, 1e16), subnormals, integers, values
   hyper-parameters take, random bit patterns.
3. python_text.json: numpy's np.mean of deterministic arrays of many lengths (kohya's
   mean_img_ar_error: pairwise summation), and str.lower() of the code points the tag frequency
   lower-cases (the ranges train::py_lower covers, each code point whose lower form differs).

sd-scripts is imported as it is, except for stand-ins for what the metadata code never calls and
this venv's transformers 5 / no torchvision lack: torchvision's transforms, transformers'
CLIPFeatureExtractor and diffusers' StableDiffusionPipeline (import-time names only).
The output is deterministic: the same bytes on every run.
"""
import argparse
import ast
import json
import math
import os
import random
import struct
import sys
import tempfile
import time
import types

import numpy as np

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "kohya")
MODEL_BYTES = 0x130000  # over 1 MiB + 64 KiB: kohya's legacy model hash reads [1 MiB, 1 MiB + 64 KiB)


def model_bytes():
    i = np.arange(MODEL_BYTES, dtype=np.int64)
    return ((i * 131 + (i >> 8) * 7) & 255).astype(np.uint8).tobytes()


def load_sd_scripts(root):
    sys.path.insert(0, root)
    import diffusers
    import diffusers.loaders.peft  # noqa: F401  (before the stand-in: diffusers probes torchvision)
    import diffusers.schedulers.scheduling_euler_ancestral_discrete  # noqa: F401
    from diffusers import AutoencoderKL, DDIMScheduler, DDPMScheduler  # noqa: F401
    import transformers

    try:
        import torchvision  # noqa: F401
    except ImportError:
        class Dummy:
            def __init__(self, *args, **kwargs):
                pass

            def __getattr__(self, name):
                return Dummy

            def __call__(self, *args, **kwargs):
                return Dummy()

        stand_in = types.ModuleType("torchvision")
        stand_in.transforms = Dummy()
        sys.modules["torchvision"] = stand_in
    if "StableDiffusionPipeline" not in diffusers.__dict__:
        diffusers.StableDiffusionPipeline = type("StableDiffusionPipeline", (), {})
    if not hasattr(transformers, "CLIPFeatureExtractor"):
        transformers.CLIPFeatureExtractor = type("CLIPFeatureExtractor", (), {})
    import train_network
    return train_network


def metadata_statements(train_network_path):
    """NetworkTrainer.train's statements from `metadata = {` to `metadata = {k: str(v) ...}`."""
    tree = ast.parse(open(train_network_path, encoding="utf-8").read())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "NetworkTrainer")
    train = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "train")

    def assigns_metadata(n, value_type):
        return (isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
                and n.targets[0].id == "metadata" and isinstance(n.value, value_type))

    first = next(i for i, n in enumerate(train.body) if assigns_metadata(n, ast.Dict))
    last = next(i for i, n in enumerate(train.body) if i > first and assigns_metadata(n, ast.DictComp))
    return compile(ast.Module(body=train.body[first:last + 1], type_ignores=[]), train_network_path, "exec")


def write_files(root, files):
    from PIL import Image

    for rel, w, h, caption in files["images"]:
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        Image.new("RGB", (w, h), (90, 120, 150)).save(path)
        if caption is not None:
            with open(os.path.splitext(path)[0] + ".txt", "w", encoding="utf-8") as f:
                f.write(caption + "\n")
    for rel, text in files.get("texts", {}).items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    with open(os.path.join(root, "model.safetensors"), "wb") as f:
        f.write(model_bytes())


def kohya_run(tn, case, root):
    """Every key train_network.py saves for the case's run (the final save)."""
    import torch
    from library import config_util, model_util, train_util
    from library.config_util import BlueprintGenerator, ConfigSanitizer
    from library.train_util import DreamBoothDataset

    argv = [a.replace("{root}", root) for a in case["argv"]]
    args = tn.setup_parser().parse_args(argv)
    train_util.verify_command_line_training_args(args)
    train_util.verify_training_args(args)
    train_util.prepare_dataset_args(args, True)

    # train(): the dataset, as it builds it.
    use_dreambooth_method = args.in_json is None
    use_user_config = args.dataset_config is not None
    blueprint_generator = BlueprintGenerator(ConfigSanitizer(True, True, args.masked_loss, True))
    if use_user_config:
        user_config = config_util.load_user_config(args.dataset_config)
    elif use_dreambooth_method:
        user_config = {"datasets": [{"subsets": config_util.generate_dreambooth_subsets_config_by_subdirs(
            args.train_data_dir, args.reg_data_dir)}]}
    else:  # "Training with captions": --in_json
        user_config = {"datasets": [{"subsets": [{"image_dir": args.train_data_dir, "metadata_file": args.in_json}]}]}
    # train() sets the latent caching strategy before the dataset (FineTuningDataset reads its suffix).
    from library import strategy_base, strategy_sd
    strategy_base.LatentsCachingStrategy._strategy = strategy_sd.SdSdxlLatentsCachingStrategy(
        True, args.cache_latents_to_disk, args.vae_batch_size, False)
    try:
        blueprint = blueprint_generator.generate(user_config, args)
        train_dataset_group, val_dataset_group = config_util.generate_dataset_group_by_blueprint(
            blueprint.dataset_group)
    finally:
        strategy_base.LatentsCachingStrategy._strategy = None
    # The fine-tuning datasets' images as kohya lists them: key, path, caption, repeats, bucket.
    ft_images = [[[info.image_key, info.absolute_path, info.caption, info.num_repeats, list(info.bucket_reso)]
                  for info in dataset.image_data.values()]
                 for dataset in train_dataset_group.datasets if isinstance(dataset, train_util.FineTuningDataset)]

    # train(): the network arguments, the optimizer, the text encoder lr, steps and epochs.
    net_kwargs = {}
    if args.network_args is not None:
        for net_arg in args.network_args:
            key, value = net_arg.split("=", 1)
            net_kwargs[key] = value
    if "dropout" not in net_kwargs:
        net_kwargs["dropout"] = args.network_dropout
    optimizer_name, optimizer_args, _ = train_util.get_optimizer(args, [torch.nn.Parameter(torch.zeros(4))])
    if args.text_encoder_lr is None or isinstance(args.text_encoder_lr, (float, int)):
        text_encoder_lr = args.text_encoder_lr
    else:
        text_encoder_lr = None if len(args.text_encoder_lr) == 0 else args.text_encoder_lr[0]
    batches = len(train_dataset_group)  # len(train_dataloader): one item per batch
    if args.max_train_epochs is not None:
        args.max_train_steps = args.max_train_epochs * math.ceil(batches / 1 / args.gradient_accumulation_steps)
    num_update_steps_per_epoch = math.ceil(batches / args.gradient_accumulation_steps)
    num_train_epochs = math.ceil(args.max_train_steps / num_update_steps_per_epoch)
    total_batch_size = args.train_batch_size * 1 * args.gradient_accumulation_steps

    scope = {
        "self": types.SimpleNamespace(update_metadata=lambda metadata, args: None),
        "args": args, "train_util": train_util, "json": json, "os": os, "DreamBoothDataset": DreamBoothDataset,
        "session_id": 1234567, "training_started_at": 1700000000.0, "text_encoder_lr": text_encoder_lr,
        "train_dataset_group": train_dataset_group, "val_dataset_group": val_dataset_group,
        "train_dataloader": range(batches), "num_train_epochs": num_train_epochs,
        "model_version": model_util.get_model_version_str_for_sd1_sd2(args.v2, args.v_parameterization),
        "optimizer_name": optimizer_name, "optimizer_args": optimizer_args, "total_batch_size": total_batch_size,
        "use_user_config": use_user_config, "use_dreambooth_method": use_dreambooth_method,
        "net_kwargs": net_kwargs,
    }
    exec(metadata_statements(tn.__file__), scope)
    metadata = scope["metadata"]
    minimum_metadata = {k: metadata[k] for k in train_util.SS_METADATA_MINIMUM_KEYS if k in metadata}

    # save_model() at the end of training: global_step, num_train_epochs.
    metadata["ss_training_finished_at"] = str(1700000100.0)
    metadata["ss_steps"] = str(args.max_train_steps)
    metadata["ss_epoch"] = str(num_train_epochs)
    saved = dict(minimum_metadata if args.no_metadata else metadata)
    clock = time.time
    time.time = lambda: 1700000100.0  # get_sai_model_spec's date and default title: fixed, in UTC (main)
    try:
        saved.update(tn.NetworkTrainer().get_sai_model_spec(args))
    finally:
        time.time = clock
    out = {"steps": args.max_train_steps, "epoch": num_train_epochs, "metadata": dict(sorted(saved.items()))}
    if ft_images:
        out["fine_tuning_images"] = ft_images
    return out


COMMON = ["--pretrained_model_name_or_path", "{root}/model.safetensors", "--output_dir", "{root}/out",
          "--network_module", "networks.lora", "--caption_extension", ".txt"]

# (name, size) pairs: shapes around a 256-pixel bucket set, some larger (scaled down), some smaller
# (scaled up), squares that fall on a bucket exactly, extreme strips.
SIZES = [(300, 200), (200, 300), (256, 256), (640, 480), (480, 640), (1000, 250), (250, 1000), (333, 222),
         (512, 384), (100, 100), (301, 199), (777, 555), (64, 320), (450, 260), (260, 450), (1024, 768),
         (123, 457), (320, 256), (256, 192), (999, 998), (700, 350), (350, 700)]
CAPTIONS = ["a cat, Sitting, window", "A Cat, standing", "café, ÉCOLE, Ωmega, Привет, İstanbul", None,
            "  spaced ,  tags , ,empty", "a cat", "TAG one,tag TWO,Tag Three", "ünïcödé, ÄÖÜ, ſ long s",
            "\u3000全角タグ\u3000, nbsp\u00a0tag\u00a0, \u2003em space\u2003,\u0085nel"]


def images(folder, sizes, first=0, names=None):
    out = []
    for i, (w, h) in enumerate(sizes):
        name = names[i] if names else f"img{first + i:02d}.png"
        out.append([f"{folder}/{name}", w, h, CAPTIONS[(first + i) % len(CAPTIONS)]])
    return out


CASES = [
    {
        "name": "folders_predefined_buckets",
        "argv": COMMON + [
            "--train_data_dir", "{root}/train", "--reg_data_dir", "{root}/reg", "--output_name", "meta_a",
            "--resolution", "256", "--enable_bucket", "--min_bucket_reso", "64", "--max_bucket_reso", "512",
            "--train_batch_size", "2", "--gradient_accumulation_steps", "2", "--max_train_steps", "100",
            "--learning_rate", "1e-4", "--unet_lr", "0.0001", "--text_encoder_lr", "5e-5",
            "--network_dim", "8", "--network_alpha", "4", "--network_dropout", "0.1",
            "--network_args", "conv_dim=4", "conv_alpha=1",
            "--optimizer_type", "AdamW", "--optimizer_args", "weight_decay=0.01", "betas=0.9,0.99",
            "--lr_scheduler", "cosine", "--lr_warmup_steps", "10", "--max_grad_norm", "0.5",
            "--mixed_precision", "bf16", "--save_precision", "fp16", "--seed", "1234", "--clip_skip", "2",
            "--noise_offset", "0.05", "--min_snr_gamma", "5", "--prior_loss_weight", "0.75",
            "--caption_dropout_rate", "0.05", "--caption_tag_dropout_rate", "0.1", "--shuffle_caption",
            "--keep_tokens", "1", "--flip_aug", "--cache_latents", "--gradient_checkpointing",
            "--training_comment", "caf\u00e9 \u2713 \"quoted\"", "--min_timestep", "100", "--max_timestep", "900",
        ],
        "files": {"images": images("train/10_cat", SIZES[:14]) + images("train/notes", [(256, 256)])
                  + images("reg/1_cat", SIZES[14:17], first=14, names=["b.png", "a.png", "caf\u00e9.png"])},
    },
    {
        # bucket_no_upscale, epochs instead of steps, defaults for the network and the optimizer,
        # more regularisation images than training images (some never used).
        "name": "folders_no_upscale_reg_unused",
        "argv": COMMON + [
            "--train_data_dir", "{root}/train", "--reg_data_dir", "{root}/reg",
            "--resolution", "320,256", "--enable_bucket", "--bucket_no_upscale", "--bucket_reso_steps", "32",
            "--min_bucket_reso", "70", "--max_bucket_reso", "700", "--max_train_epochs", "3", "--seed", "7",
            "--network_dim", "4", "--network_alpha", "1", "--learning_rate", "0.00025",
            "--lr_scheduler", "constant_with_warmup", "--lr_warmup_steps", "0.1",
            "--huber_c", "0.2", "--loss_type", "huber", "--huber_schedule", "exponential",
        ],
        "files": {"images": images("train/2_person", SIZES[:4], first=3)
                  + images("reg/1_person", SIZES[4:16], first=7)},
    },
    {
        # No bucketing: one fixed resolution, no bucket info, no bucket limits.
        "name": "folders_no_bucket",
        "argv": COMMON + [
            "--train_data_dir", "{root}/train", "--resolution", "256", "--max_train_steps", "5", "--seed", "3",
            "--network_dim", "16", "--network_alpha", "16", "--network_args", "conv_dim=2",
        ],
        "files": {"images": images("train/3_thing", SIZES[16:22], first=2)},
    },
    {
        # The minimum metadata.
        "name": "no_metadata",
        "argv": COMMON + [
            "--train_data_dir", "{root}/train", "--resolution", "256", "--max_train_steps", "5", "--seed", "3",
            "--network_dim", "16", "--network_alpha", "0", "--no_metadata", "--network_args", "conv_dim=2",
        ],
        "files": {"images": images("train/3_thing", SIZES[16:22], first=2)},
    },
    {
        # A dataset config: several subsets in its order, a folder name used twice, a reg subset,
        # subset options.
        "name": "dataset_config",
        "argv": COMMON + [
            "--dataset_config", "{root}/dataset.toml", "--max_train_steps", "40", "--seed", "11",
            "--network_dim", "8", "--network_alpha", "8.0", "--learning_rate", "3e-4", "--output_name", "meta_d",
            "--metadata_title", "Meta D", "--metadata_author", "tester",
        ],
        "files": {
            "images": images("a/pics", SIZES[:7]) + images("b/pics", SIZES[7:10], first=7)
            + images("c/extra", SIZES[10:13], first=10) + images("r/reg", SIZES[13:15], first=13),
            "texts": {"dataset.toml": (
                "[general]\nshuffle_caption = true\ncaption_extension = \".txt\"\nkeep_tokens = 1\n\n"
                "[[datasets]]\nresolution = [320, 256]\nbatch_size = 2\nenable_bucket = true\n"
                "min_bucket_reso = 128\nmax_bucket_reso = 512\n\n"
                "  [[datasets.subsets]]\n  image_dir = \"{root}/b/pics\"\n  num_repeats = 3\n"
                "  class_tokens = \"sks thing\"\n  flip_aug = true\n\n"
                "  [[datasets.subsets]]\n  image_dir = \"{root}/a/pics\"\n  num_repeats = 2\n"
                "  caption_prefix = \"photo of\"\n\n"
                "  [[datasets.subsets]]\n  image_dir = \"{root}/c/extra\"\n  keep_tokens = 0\n"
                "  random_crop = true\n\n"
                "  [[datasets.subsets]]\n  image_dir = \"{root}/r/reg\"\n  is_reg = true\n"
                "  class_tokens = \"thing\"\n")},
        },
    },
    {
        # A subset whose image_dir an earlier subset of the dataset already registered: kohya's
        # DreamBoothDataset ignores it ("ignore duplicated subset"), a reg subset of the same folder
        # too, with whatever repeats or tokens it has.
        "name": "dataset_config_duplicate_dir",
        "argv": COMMON + [
            "--dataset_config", "{root}/dataset.toml", "--max_train_steps", "20", "--seed", "17",
            "--network_dim", "4", "--network_alpha", "4.0",
        ],
        "files": {
            "images": images("a/pics", SIZES[:5]) + images("b/pics", SIZES[5:8], first=5),
            "texts": {"dataset.toml": (
                "[general]\ncaption_extension = \".txt\"\n\n"
                "[[datasets]]\nresolution = 256\nbatch_size = 2\nenable_bucket = true\n"
                "min_bucket_reso = 128\nmax_bucket_reso = 512\n\n"
                "  [[datasets.subsets]]\n  image_dir = \"{root}/a/pics\"\n  num_repeats = 2\n"
                "  class_tokens = \"sks thing\"\n\n"
                "  [[datasets.subsets]]\n  image_dir = \"{root}/b/pics\"\n  num_repeats = 3\n\n"
                "  [[datasets.subsets]]\n  image_dir = \"{root}/a/pics\"\n  num_repeats = 5\n"
                "  class_tokens = \"other\"\n\n"
                "  [[datasets.subsets]]\n  image_dir = \"{root}/a/pics\"\n  is_reg = true\n"
                "  class_tokens = \"thing\"\n")},
        },
    },
    {
        # Several datasets (kohya's multi-resolution configs): each its own resolution, buckets and
        # batch size, one folder in both (tag frequency counts it once, dataset dirs twice), the
        # caption keys wildcards and token warm-up.
        "name": "dataset_config_multires",
        "argv": COMMON + [
            "--dataset_config", "{root}/dataset.toml", "--max_train_epochs", "2", "--seed", "13",
            "--network_dim", "4", "--network_alpha", "2", "--gradient_accumulation_steps", "2",
        ],
        "files": {
            "images": images("a/pics", SIZES[:9]) + images("b/more", SIZES[9:14], first=9),
            "texts": {"dataset.toml": (
                "[general]\ncaption_extension = \".txt\"\nenable_bucket = true\nmin_bucket_reso = 64\n"
                "max_bucket_reso = 512\n\n"
                "[[datasets]]\nresolution = 256\nbatch_size = 2\n\n"
                "  [[datasets.subsets]]\n  image_dir = \"{root}/a/pics\"\n  num_repeats = 2\n"
                "  enable_wildcard = true\n\n"
                "[[datasets]]\nresolution = [320, 256]\nbatch_size = 3\nbucket_reso_steps = 32\n\n"
                "  [[datasets.subsets]]\n  image_dir = \"{root}/a/pics\"\n  token_warmup_step = 5\n\n"
                "  [[datasets.subsets]]\n  image_dir = \"{root}/b/more\"\n  num_repeats = 3\n\n"
                "[[datasets]]\nresolution = 192\nbatch_size = 1\nenable_bucket = false\n\n"
                "  [[datasets.subsets]]\n  image_dir = \"{root}/b/more\"\n  flip_aug = true\n")},
        },
    },
    {
        # The network's options not given: kohya writes argparse's defaults as they are written
        # (--network_alpha's int 1 as "1", where a given 1 is "1.0"; --network_dim's None).
        "name": "folders_network_defaults",
        "argv": COMMON + [
            "--train_data_dir", "{root}/train", "--resolution", "256", "--max_train_steps", "5", "--seed", "3",
        ],
        "files": {"images": images("train/3_thing", SIZES[16:22], first=2)},
    },
    {
        # --debiased_estimation_loss given (kohya writes bool(args.debiased_estimation_loss)).
        "name": "folders_debiased_estimation",
        "argv": COMMON + [
            "--train_data_dir", "{root}/train", "--resolution", "256", "--max_train_steps", "5", "--seed", "3",
            "--network_dim", "8", "--network_alpha", "4", "--min_snr_gamma", "5", "--debiased_estimation_loss",
        ],
        "files": {"images": images("train/3_thing", SIZES[16:22], first=2)},
    },
    {
        # The noise variants given (ss_multires_*, ss_adaptive_noise_scale, ss_ip_noise_gamma*,
        # ss_noise_offset_random_strength), smooth_l1, and the loss variants with no key.
        "name": "folders_noise_variants",
        "argv": COMMON + [
            "--train_data_dir", "{root}/train", "--resolution", "256", "--max_train_steps", "5", "--seed", "3",
            "--network_dim", "8", "--network_alpha", "4", "--noise_offset", "0.1", "--noise_offset_random_strength",
            "--adaptive_noise_scale", "0.05", "--multires_noise_iterations", "6", "--multires_noise_discount", "0.4",
            "--ip_noise_gamma", "0.1", "--ip_noise_gamma_random_strength", "--loss_type", "smooth_l1",
            "--huber_schedule", "constant", "--v_pred_like_loss", "0.2",
        ],
        "files": {"images": images("train/3_thing", SIZES[16:22], first=2)},
    },
    {
        # Zero terminal SNR with v-prediction and the v loss scaled like the noise prediction's.
        "name": "folders_zero_terminal_snr",
        "argv": COMMON + [
            "--train_data_dir", "{root}/train", "--resolution", "256", "--max_train_steps", "5", "--seed", "3",
            "--network_dim", "8", "--network_alpha", "4", "--v_parameterization", "--zero_terminal_snr",
            "--scale_v_pred_loss_like_noise_pred", "--min_snr_gamma", "5",
        ],
        "files": {"images": images("train/3_thing", SIZES[16:22], first=2)},
    },
    {
        # kohya's fine-tuning metadata through --in_json ("Training with captions"): relative keys
        # under --train_data_dir (one in a sub-folder), an absolute key, captions and tags in every
        # combination (null, empty, absent), a key given twice (its first place, its last value),
        # image_size and train_resolution (not read), --dataset_repeats as the subset's repeats.
        "name": "finetune_in_json",
        "argv": COMMON + [
            "--in_json", "{root}/meta_cap_dd.json", "--train_data_dir", "{root}/imgs", "--dataset_repeats", "3",
            "--resolution", "256", "--enable_bucket", "--min_bucket_reso", "64", "--max_bucket_reso", "512",
            "--max_train_steps", "20", "--seed", "5", "--shuffle_caption", "--keep_tokens", "1",
            "--network_dim", "4", "--network_alpha", "2", "--output_name", "meta_ft",
        ],
        "files": {
            "images": [["imgs/a.png", 300, 200, None], ["imgs/bb.png", 200, 300, None],
                       ["imgs/sub/ccc.png", 640, 480, None], ["other/x.png", 256, 256, None],
                       ["imgs/dd.png", 480, 640, None], ["imgs/eeee.png", 1000, 250, None],
                       ["imgs/Ff.png", 333, 222, "a caption file fine-tuning does not read"]],
            "texts": {"meta_cap_dd.json": (
                '{"a.png": {"caption": "a cat", "tags": "Tag1, tag2"},\n'
                ' "bb.png": {"caption": "photo of dog"},\n'
                ' "sub/ccc.png": {"tags": "Solo, Outdoors, solo"},\n'
                ' "{root}/other/x.png": {"caption": null, "tags": ""},\n'
                ' "dd.png": {"caption": "", "tags": "red, Blue", "train_resolution": [256, 320]},\n'
                ' "eeee.png": {"caption": "long, caption", "image_size": [1000, 250]},\n'
                ' "Ff.png": {"caption": "caf\u00e9 \u00c9cole", "tags": "\u00c9COLE, x"},\n'
                ' "a.png": {"caption": "a cat again", "tags": "tag1, TAG3"}}\n')},
        },
    },
    {
        # Fine-tuning subsets in a dataset config: a JSONL file with wildcards and its own separator
        # (multi-line captions and tags), a JSON file of absolute keys without image_dir whose repeats
        # come from --dataset_repeats, DreamBooth keys in [general] (allowed there, unused), and a
        # DreamBooth dataset beside them.
        "name": "finetune_dataset_config",
        "argv": COMMON + [
            "--dataset_config", "{root}/dataset.toml", "--dataset_repeats", "4", "--max_train_steps", "30",
            "--seed", "9", "--network_dim", "4", "--network_alpha", "4", "--output_name", "meta_ftc",
        ],
        "files": {
            "images": [["pics/p1.png", 300, 200, None], ["pics/p22.png", 200, 300, None],
                       ["pics/p333.png", 256, 256, None], ["abs/q.png", 640, 480, None],
                       ["abs/qq.png", 480, 640, None]] + images("db/pics", SIZES[:3]),
            "texts": {
                "m1.jsonl": (
                    '{"image_path": "p1.png", "caption": "line one\\n\\n  \\nline {two|2}", "tags": "x; y\\nz"}\n'
                    '{"image_path": "p22.png", "caption": "only caption", "image_size": [200, 300]}\n'
                    '{"image_path": "p333.png", "tags": "t"}\n'),
                "m2.json": (
                    '{"{root}/abs/q.png": {"caption": "abs caption", "tags": "Q, q"},'
                    ' "{root}/abs/qq.png": {"caption": "two\\nlines", "tags": null}}'),
                "dataset.toml": (
                    "[general]\ncaption_extension = \".txt\"\nclass_tokens = \"unused\"\n\n"
                    "[[datasets]]\nresolution = 256\nbatch_size = 2\nenable_bucket = true\n"
                    "min_bucket_reso = 64\nmax_bucket_reso = 512\n\n"
                    "  [[datasets.subsets]]\n  metadata_file = \"{root}/m1.jsonl\"\n  image_dir = \"{root}/pics\"\n"
                    "  num_repeats = 2\n  enable_wildcard = true\n  caption_separator = \";\"\n\n"
                    "  [[datasets.subsets]]\n  metadata_file = \"{root}/m2.json\"\n  flip_aug = true\n\n"
                    "[[datasets]]\nresolution = 256\n\n"
                    "  [[datasets.subsets]]\n  image_dir = \"{root}/db/pics\"\n  num_repeats = 1\n")},
        },
    },
]


def py_float_table():
    rng = random.Random(20240611)
    values = [0.0, -0.0, 1.0, -1.0, 0.5, 0.1, 0.2, 0.1 + 0.2, 0.3, 1 / 3, 2 / 3, 100.0, 123.0, 1e-4, 1e-5, 1.5e-07,
              1e16, 1e15, 1e22, 1e23, 9007199254740992.0, 9007199254740993.0, 2.0 ** 63, 2.0 ** 64,
              5e-324, 2.2250738585072014e-308, 2.225073858507201e-308, 1.7976931348623157e308,
              0.0001, 0.00025, 3e-5, 5e-05, 1e-06, 0.05, 0.99, 0.999, 1e-08, 0.19939184988843306,
              1700000000.123456, 9999999999999998.0, 999999999999999.9, 0.001, 0.009999999999999998]
    for k in range(-30, 31):
        base = 10.0 ** k
        values.append(base)
        up = down = base
        for _ in range(3):
            up, down = math.nextafter(up, math.inf), math.nextafter(down, 0.0)
            values += [up, down]
    for _ in range(200):  # subnormals
        values.append(struct.unpack("<d", struct.pack("<Q", rng.getrandbits(52) or 1))[0])
    for _ in range(300):  # integers, some beyond 2^53
        values.append(float(rng.getrandbits(rng.randint(1, 70))))
    for _ in range(700):  # hyper-parameter-like: few digits, any scale
        values.append(rng.randint(1, 9999) * 10.0 ** rng.randint(-12, 20))
    for _ in range(300):
        values.append(round(rng.uniform(-10, 10), rng.randint(0, 8)))
    while len(values) < 3000:  # random bit patterns, finite
        v = struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0]
        if math.isfinite(v):
            values.append(v)
    values += [-v for v in values[:40]] + [math.inf, -math.inf, math.nan]
    lines = []
    for v in values:
        lines.append(f"{struct.pack('>d', v).hex()} {repr(v)}")
    return "\n".join(lines) + "\n"


LOWER_RANGES = [(0x0, 0x7f), (0xc0, 0x17f), (0x386, 0x3ce), (0x400, 0x45f)]


def python_text():
    means = {}
    for n in list(range(1, 40)) + [63, 64, 65, 127, 128, 129, 130, 135, 136, 200, 255, 256, 257, 1000, 1023,
                                   4099, 10007]:
        a = [((i * 7919 + n * 31) % 1000003) / 1000003.0 for i in range(n)]
        means[str(n)] = repr(float(np.mean(np.abs(np.array(a)))))
    changed = {}
    for lo, hi in LOWER_RANGES:
        for cp in range(lo, hi + 1):
            if chr(cp).lower() != chr(cp):
                changed[f"{cp:04x}"] = " ".join(f"{ord(c):04x}" for c in chr(cp).lower())
    return {"numpy_mean": means, "lower": {"ranges": [list(r) for r in LOWER_RANGES], "changed": changed}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sd-scripts", required=True)
    args = ap.parse_args()
    os.environ["TZ"] = "UTC"
    time.tzset()
    tn = load_sd_scripts(os.path.abspath(args.sd_scripts))
    os.makedirs(OUT, exist_ok=True)

    cases = []
    for case in CASES:
        with tempfile.TemporaryDirectory() as root:
            texts = {k: v.replace("{root}", root) for k, v in case["files"].get("texts", {}).items()}
            write_files(root, {"images": case["files"]["images"], "texts": texts})
            run = kohya_run(tn, case, root)
        md = {k: v.replace(root, "{root}") for k, v in run.pop("metadata").items()}
        if "fine_tuning_images" in run:
            run["fine_tuning_images"] = [[[e[0].replace(root, "{root}"), e[1].replace(root, "{root}")] + e[2:]
                                          for e in ds] for ds in run["fine_tuning_images"]]
        cases.append({"name": case["name"], "argv": case["argv"], "files": case["files"],
                      "model_bytes": MODEL_BYTES, **run, "metadata": md})
        print(f"{case['name']}: {len(md)} keys, {run['steps']} steps, {run['epoch']} epochs")
    with open(os.path.join(OUT, "run_metadata.json"), "w", encoding="utf-8") as f:
        json.dump(cases, f, indent=1, ensure_ascii=False)
        f.write("\n")
    with open(os.path.join(OUT, "py_float.txt"), "w", encoding="ascii") as f:
        f.write(py_float_table())
    with open(os.path.join(OUT, "python_text.json"), "w", encoding="ascii") as f:
        json.dump(python_text(), f, indent=1)
        f.write("\n")
    print("py_float.txt, python_text.json written")


if __name__ == "__main__":
    main()
