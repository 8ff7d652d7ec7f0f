// Every setting of an sdtrain run in one typed struct, under kohya sd-scripts' train_network.py
// option names, with kohya's defaults (library/train_util.py, train_network.py, networks/lora.py;
// an optional is kohya's None), declared with their options in train/run/options.def (the table of
// train/run/option_table.h reads, shows and records them). validate() applies kohya's rules for
// contradictions and ours for what sdtrain does differently; the derived values (precision,
// learning rates, LoRA config, objective, ...) are what the run is built from. The command-line /
// TOML layer that fills it is tools/sdtrain/ (kohya's option names and config file).
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ggml-lite/core/quant.h"
#include "ggml-lite/core/runtime.h"
#include "lora/kohya.h"
#include "optim/optimizer_config.h"
#include "pipelines/base_weights.h"
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

// kohya's --resolution: width, height ("512" or "512,768").
using Resolution = std::optional<std::array<int, 2>>;
// --face_crop_aug_range's two numbers (low, high).
using FaceCropRange = std::optional<std::array<double, 2>>;

struct RunConfig {
    // Every option of train/run/options.def, under kohya's name with kohya's default.
#define GL_OPTION(group, name, Type, def, label, help, traits) Type name{def};
#include "train/run/options.def"

    // kohya options accepted and not needed here (--xformers, ...): one line each for the log.
    std::vector<std::string> notes;
    // The options a command line or config file set (kohya writes a few defaults into its metadata
    // differently from the same value given).
    std::set<std::string> given;

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
    // The base model's family (models/family.h): SD1.x (kohya's --v2 and SDXL's trainer are others).
    const models::Family& family() const;
    lora::LoraConfig lora_config() const;     // network_dim / alpha / dropout and network_args
    optim::OptimizerConfig optimizer() const; // optimizer_type (or the old flags) and its args
    bool adafactor_relative_step() const;     // the lr and its schedule are Adafactor's own
    Objective objective() const;
    int clip_chunks() const { return max_token_length.value_or(75) / 75; }
    // --base_weights with their --base_weights_multiplier (1 where none is given).
    std::vector<lora::BaseWeightsFile> base_weight_files() const;
    gl::WeightFormat unet_base_format() const;          // from --fp8_base* / --int8_base*
    gl::WeightFormat text_encoder_base_format() const;  // only --fp8_base / --int8_base reach it
    uint64_t seed_or(uint64_t drawn) const { return seed.value_or(drawn); }
};

// The --lr_scheduler names: optim's schedules, and kohya's adafactor (Adafactor's own lr).
std::vector<std::string> lr_scheduler_names();

// kohya's LR schedule for a run of total_steps optimizer steps (warm-up from lr_warmup_steps).
optim::LrSchedule lr_schedule(const RunConfig& c, int64_t total_steps);
// Refuses (gl::Error) a schedule whose absolute torch lrs (eta_min, OneCycleLR's max_lr) cannot
// hold for these parameter groups' lrs (block lr weights and LoRA+ make groups of other lrs).
void check_schedule_groups(const RunConfig& c, int64_t total_steps, const std::vector<double>& group_lrs);

// The network_args as key=value pairs (kohya splits at the first '=' into a dict: a key given
// twice keeps its first place and its last value); gl::Error naming a bad one.
std::vector<std::pair<std::string, std::string>> parse_network_args(const std::vector<std::string>& args);

}  // namespace train
