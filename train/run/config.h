// Every setting of an sdtrain run in one typed struct, under kohya sd-scripts' train_network.py
// option names, with kohya's defaults (library/train_util.py, train_network.py, networks/lora.py;
// an optional is kohya's None). validate() applies kohya's rules for contradictions and ours for
// what sdtrain does differently; the derived values (precision, learning rates, LoRA config,
// objective, ...) are what the run is built from. The command-line / TOML layer that fills it is
// tools/sdtrain/ (kohya's option names and config file).
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ggml-lite/core/quant.h"
#include "ggml-lite/core/runtime.h"
#include "lora/kohya.h"
#include "optim/optimizer_config.h"
#include "optim/schedule.h"
#include "train/objective.h"

namespace train {

// kohya's --lr_warmup_steps: an int (steps), a float below 1 (a ratio of the total steps) or a
// percentage ("10%").
struct WarmupSteps {
    bool ratio = false;
    double value = 0;  // steps when !ratio
    int64_t steps(int64_t total) const;
};

struct RunConfig {
    // ---- model ----
    std::string pretrained_model_name_or_path;
    bool v_parameterization = false;
    std::optional<int> clip_skip;         // None: 1
    std::optional<int> max_token_length;  // None (75), 150 or 225
    bool no_half_vae = false;             // the VAE in f32 whatever the precision

    // ---- data ----
    std::optional<std::string> train_data_dir, reg_data_dir, dataset_config;
    std::optional<std::array<int, 2>> resolution;  // width, height ("512" or "512,768")
    int train_batch_size = 1;
    bool enable_bucket = false;
    int min_bucket_reso = 256, max_bucket_reso = 1024, bucket_reso_steps = 64;
    bool bucket_no_upscale = false;
    std::string caption_extension = ".caption";
    bool shuffle_caption = false;
    std::string caption_separator = ",";
    int keep_tokens = 0;
    std::string keep_tokens_separator;
    std::optional<std::string> secondary_separator, caption_prefix, caption_suffix;
    double caption_dropout_rate = 0, caption_tag_dropout_rate = 0;
    int caption_dropout_every_n_epochs = 0;
    bool flip_aug = false, random_crop = false, color_aug = false;
    double prior_loss_weight = 1.0;
    bool cache_latents = false, cache_latents_to_disk = false;
    int vae_batch_size = 1;
    bool cache_text_encoder_outputs = false, cache_text_encoder_outputs_to_disk = false;
    int max_data_loader_n_workers = 8;  // loader threads (at most the machine's cores)

    // ---- network ----
    std::string network_module;        // "networks.lora" (required, as kohya)
    std::optional<int> network_dim;    // None: 4
    double network_alpha = 1.0;        // 0: alpha = dim
    std::optional<double> network_dropout;
    std::vector<std::string> network_args;  // conv_dim, conv_alpha, rank_dropout, module_dropout
    bool network_train_unet_only = false, network_train_text_encoder_only = false;
    std::optional<std::string> network_weights;  // continue from a LoRA file
    bool dim_from_weights = false;
    std::optional<std::string> training_comment;

    // ---- optimizer ----
    std::string optimizer_type;  // "": AdamW
    std::vector<std::string> optimizer_args;
    bool use_8bit_adam = false, use_lion_optimizer = false;
    double learning_rate = 2.0e-6;
    std::optional<double> unet_lr, text_encoder_lr;
    double max_grad_norm = 1.0;
    std::string lr_scheduler = "constant";
    WarmupSteps lr_warmup_steps;
    int lr_scheduler_num_cycles = 1;
    double lr_scheduler_power = 1.0;

    // ---- training ----
    int64_t max_train_steps = 1600;
    std::optional<int> max_train_epochs;
    int gradient_accumulation_steps = 1;
    std::optional<uint64_t> seed;  // None: drawn at start (and recorded in ss_seed)
    std::string mixed_precision = "no";  // no | fp16 | bf16
    bool full_fp16 = false, full_bf16 = false;
    std::optional<double> noise_offset, min_snr_gamma;
    std::string loss_type = "l2";  // l1 | l2 | huber
    double huber_c = 0.1, huber_scale = 1.0;
    std::string huber_schedule = "snr";
    std::optional<int> min_timestep, max_timestep;

    // ---- memory ----
    bool gradient_checkpointing = false;
    std::optional<std::string> vram_limit;  // "8G" or "auto": auto-fit the configuration
    bool allow_8bit_optimizer = false, allow_cached_text_encoder = false, allow_unet_only = false;
    gl::Backend backend = gl::Backend::automatic;
    // The frozen base's matrices in 8 bits (core/quant.h), scaled per output channel: kohya's
    // --fp8_base (UNet and text encoder) and --fp8_base_unet (UNet only), and the same in int8.
    bool fp8_base = false, fp8_base_unet = false, int8_base = false, int8_base_unet = false;

    // ---- output ----
    std::string output_dir;
    std::optional<std::string> output_name;
    std::string save_model_as = "safetensors";
    std::optional<std::string> save_precision;  // float | fp16 | bf16; None: as trained (f32 masters)
    std::optional<int> save_every_n_steps, save_every_n_epochs, save_n_epoch_ratio;
    std::optional<int> save_last_n_steps, save_last_n_epochs, save_last_n_steps_state, save_last_n_epochs_state;
    bool save_state = false, save_state_on_train_end = false;
    std::optional<std::string> resume;  // a state folder written by --save_state
    bool no_metadata = false;
    std::optional<std::string> metadata_title, metadata_author, metadata_description, metadata_license,
        metadata_tags;

    // ---- sampling ----
    std::optional<int> sample_every_n_steps, sample_every_n_epochs;
    std::optional<std::string> sample_prompts;
    std::string sample_sampler = "ddim";
    bool sample_at_first = false;

    // ---- run ----
    bool dry_run = false;  // print the plan and stop before loading any weights
    // kohya options accepted and not needed here (--xformers, ...): one line each for the log.
    std::vector<std::string> notes;

    // kohya's rules for contradictions and values out of range, and ours for what sdtrain does
    // not do; throws gl::Error naming the option(s) ("--full_bf16 needs --mixed_precision bf16").
    // Also applies kohya's silent fixes (cache_latents_to_disk turns cache_latents on; sample
    // intervals <= 0 are off), each recorded in notes.
    void validate();  // idempotent: a second call changes nothing
    void note(const std::string& text);  // adds to notes once

    // ---- derived ----
    Precision precision() const;              // mixed_precision: no -> fp32, fp16, bf16
    lora::SavePrecision save_dtype() const;   // save_precision, else the masters' f32
    bool train_unet() const { return !network_train_text_encoder_only; }
    // kohya trains the text encoder unless --network_train_unet_only; a text-encoder lr of 0
    // leaves it untrained too (kohya then skips its parameters: "NO LR skipping!").
    bool train_text_encoder() const;
    double unet_learning_rate() const { return unet_lr.value_or(learning_rate); }
    double text_encoder_learning_rate() const { return text_encoder_lr.value_or(learning_rate); }
    lora::LoraConfig lora_config() const;     // network_dim / alpha / dropout and network_args
    optim::OptimizerConfig optimizer() const; // optimizer_type (or the old flags) and its args
    bool adafactor_relative_step() const;     // the lr and its schedule are Adafactor's own
    Objective objective() const;
    int clip_chunks() const { return max_token_length.value_or(75) / 75; }
    gl::WeightFormat unet_base_format() const;          // from --fp8_base* / --int8_base*
    gl::WeightFormat text_encoder_base_format() const;  // only --fp8_base / --int8_base reach it
    uint64_t seed_or(uint64_t drawn) const { return seed.value_or(drawn); }
};

// kohya's LR schedule for a run of total_steps optimizer steps (warm-up from lr_warmup_steps).
optim::LrSchedule lr_schedule(const RunConfig& c, int64_t total_steps);

// The network_args as key=value pairs (kohya splits at the first '='); gl::Error naming a bad one.
std::vector<std::pair<std::string, std::string>> parse_network_args(const std::vector<std::string>& args);

}  // namespace train
