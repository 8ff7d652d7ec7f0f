#include "tools/sdtrain/option_table.h"

#include <algorithm>
#include <cctype>
#include <limits>

#include "tools/common/cli.h"

namespace sdtrain {

namespace {

using gl::cli::UsageError;
using train::RunConfig;

constexpr int kIntMax = std::numeric_limits<int>::max();
constexpr double kInf = std::numeric_limits<double>::max();

const char* kModel = "Model";
const char* kData = "Data (folders or --dataset_config, captions, buckets, caches)";
const char* kNetwork = "Network (LoRA / LoCon)";
const char* kTraining = "Training (steps, precision, loss, noise)";
const char* kOptimizer = "Optimizer and learning rate";
const char* kMemory = "Memory (the plan is made before any weight is loaded)";
const char* kOutput = "Output (files, saves, states, resume)";
const char* kSampling = "Sampling";
const char* kRun = "Run";
const char* kNotNeeded = "Accepted for kohya compatibility, not needed";

const std::string& one(const std::string& where, const Values& v) {
    if (v.size() != 1) throw UsageError(gl::cat(where, " takes one value, got ", v.size()));
    return v[0];
}

bool parse_bool(const std::string& where, const std::string& v) {
    std::string l = v;
    std::transform(l.begin(), l.end(), l.begin(), [](unsigned char ch) { return char(std::tolower(ch)); });
    if (l == "true") return true;
    if (l == "false") return false;
    throw UsageError(gl::cat(where, " wants true or false, got '", v, "'"));
}

Option make(std::string name, const char* group, Kind kind, std::string type, std::string help,
            std::function<void(RunConfig&, const std::string&, const Values&)> set, bool numeric = false) {
    return Option{std::move(name), group, kind, std::move(type), std::move(help), numeric, std::move(set)};
}

Option flag(std::string name, const char* group, std::string help, bool RunConfig::*m) {
    return make(std::move(name), group, Kind::flag, "", std::move(help),
                [m](RunConfig& c, const std::string& w, const Values& v) { c.*m = v.empty() || parse_bool(w, one(w, v)); });
}

template <class T>
Option integer(std::string name, const char* group, std::string help, T RunConfig::*m, T lo, T hi) {
    return make(std::move(name), group, Kind::value, "INT", help + " " + gl::cli::range_text(+lo, +hi),
                [m, lo, hi](RunConfig& c, const std::string& w, const Values& v) {
                    c.*m = gl::cli::parse_int<T>(w, one(w, v), lo, hi);
                },
                true);
}

Option opt_integer(std::string name, const char* group, std::string help, std::optional<int> RunConfig::*m, int lo,
                   int hi = kIntMax) {
    return make(std::move(name), group, Kind::value, "INT", help + " " + gl::cli::range_text(lo, hi),
                [m, lo, hi](RunConfig& c, const std::string& w, const Values& v) {
                    c.*m = gl::cli::parse_int<int>(w, one(w, v), lo, hi);
                },
                true);
}

// Every number option is kept as a double (what metadata and the plan show, as kohya's Python
// floats) and computed in float by the run: it must hold as one.
double parse_number(const std::string& where, const std::string& text, double lo, double hi) {
    return gl::cli::parse_real<double, float>(where, text, lo, hi);
}

Option real(std::string name, const char* group, std::string help, double RunConfig::*m, double lo = 0,
            double hi = kInf) {
    return make(std::move(name), group, Kind::value, "NUMBER", std::move(help),
                [m, lo, hi](RunConfig& c, const std::string& w, const Values& v) {
                    c.*m = parse_number(w, one(w, v), lo, hi);
                },
                true);
}

Option opt_real(std::string name, const char* group, std::string help, std::optional<double> RunConfig::*m,
                double lo = 0, double hi = kInf) {
    return make(std::move(name), group, Kind::value, "NUMBER", std::move(help),
                [m, lo, hi](RunConfig& c, const std::string& w, const Values& v) {
                    c.*m = parse_number(w, one(w, v), lo, hi);
                },
                true);
}

// The value of a path option: an empty one would name the working folder, or nothing.
const std::string& path_value(const std::string& where, const Values& v, const std::string& type) {
    const std::string& s = one(where, v);
    if (s.empty() && (type == "PATH" || type == "FILE" || type == "FOLDER" || type == "TOML"))
        throw UsageError(where + " wants a path, got ''");
    return s;
}

Option text(std::string name, const char* group, std::string type, std::string help, std::string RunConfig::*m) {
    return make(std::move(name), group, Kind::value, type, std::move(help),
                [m, type](RunConfig& c, const std::string& w, const Values& v) { c.*m = path_value(w, v, type); });
}

Option opt_text(std::string name, const char* group, std::string type, std::string help,
                std::optional<std::string> RunConfig::*m) {
    return make(std::move(name), group, Kind::value, type, std::move(help),
                [m, type](RunConfig& c, const std::string& w, const Values& v) { c.*m = path_value(w, v, type); });
}

Option list(std::string name, const char* group, std::string help, std::vector<std::string> RunConfig::*m) {
    return make(std::move(name), group, Kind::list, "K=V ...", std::move(help),
                [m](RunConfig& c, const std::string&, const Values& v) { c.*m = v; });
}

// A kohya option that changes nothing here: accepted, with a note in the plan.
Option noted(std::string name, Kind kind, std::string why) {
    const std::string n = name;
    return make(std::move(name), kNotNeeded, kind, kind == Kind::flag ? "" : "VALUE", why,
                [n, why](RunConfig& c, const std::string&, const Values&) { c.note("--" + n + ": " + why); });
}

// A kohya option sdtrain does not implement: refused unless its value is one that changes nothing
// (false, 0, empty, or the given default).
Option refused(std::string name, Kind kind, std::string why, std::string inert_value = "") {
    return make(std::move(name), "", kind, "", "",
                [kind, why, inert_value](RunConfig&, const std::string& w, const Values& v) {
                    const bool inert = kind == Kind::flag ? (!v.empty() && !parse_bool(w, v[0]))
                                       : v.empty() ? true
                                                   : std::all_of(v.begin(), v.end(), [&](const std::string& s) {
                                                         return s.empty() || s == "0" || s == "0.0" || s == "None" ||
                                                                (!inert_value.empty() && s == inert_value);
                                                     });
                    if (!inert) throw UsageError(gl::cat(w, ": kohya's option is not supported by sdtrain (", why, ")"));
                });
}

std::vector<Option> build() {
    using train::WarmupSteps;
    std::vector<Option> t = {
        // ---- model ----
        text("pretrained_model_name_or_path", kModel, "PATH",
             "the SD1.5 model: a single file (.safetensors / .ckpt) or a diffusers folder (required)",
             &RunConfig::pretrained_model_name_or_path),
        flag("v_parameterization", kModel, "train v-prediction (a v-prediction SD1.x model)",
             &RunConfig::v_parameterization),
        opt_integer("clip_skip", kModel, "use the text encoder's n-th layer from the end", &RunConfig::clip_skip, 1, 12),
        opt_integer("max_token_length", kModel, "150 or 225: captions of 2 or 3 chunks of 75 tokens",
                    &RunConfig::max_token_length, 150, 225),
        flag("no_half_vae", kModel, "run the VAE in f32 whatever the precision", &RunConfig::no_half_vae),
        // ---- data ----
        opt_text("train_data_dir", kData, "PATH", "folder of <repeats>_<name> image folders", &RunConfig::train_data_dir),
        opt_text("reg_data_dir", kData, "PATH", "regularisation images, same layout", &RunConfig::reg_data_dir),
        opt_text("dataset_config", kData, "TOML", "kohya's dataset config ([general], [[datasets]], "
                 "[[datasets.subsets]])", &RunConfig::dataset_config),
        make("resolution", kData, Kind::value, "W[,H]", "training resolution ('512' or '512,768')",
             [](RunConfig& c, const std::string& w, const Values& v) {
                 const std::string& s = one(w, v);
                 const size_t comma = s.find(',');
                 const int a = gl::cli::parse_int<int>(w, s.substr(0, comma), 1, 1 << 16);
                 const int b = comma == std::string::npos ? a : gl::cli::parse_int<int>(w, s.substr(comma + 1), 1, 1 << 16);
                 c.resolution = std::array<int, 2>{a, b};
             }),
        integer("train_batch_size", kData, "images per batch", &RunConfig::train_batch_size, 1, 1 << 16),
        flag("enable_bucket", kData, "aspect-ratio buckets", &RunConfig::enable_bucket),
        integer("min_bucket_reso", kData, "smallest bucket side", &RunConfig::min_bucket_reso, 1, 1 << 16),
        integer("max_bucket_reso", kData, "largest bucket side", &RunConfig::max_bucket_reso, 1, 1 << 16),
        integer("bucket_reso_steps", kData, "bucket side step", &RunConfig::bucket_reso_steps, 1, 1 << 16),
        flag("bucket_no_upscale", kData, "buckets never enlarge an image", &RunConfig::bucket_no_upscale),
        text("caption_extension", kData, "EXT", "caption file extension (kohya's default .caption)",
             &RunConfig::caption_extension),
        text("caption_extention", kData, "EXT", "the same (kohya keeps the old spelling)", &RunConfig::caption_extension),
        flag("shuffle_caption", kData, "shuffle the caption's tags each step", &RunConfig::shuffle_caption),
        text("caption_separator", kData, "TEXT", "tag separator", &RunConfig::caption_separator),
        integer("keep_tokens", kData, "leading tags kept in place when shuffling", &RunConfig::keep_tokens, 0, 1 << 16),
        text("keep_tokens_separator", kData, "TEXT", "tags before it stay fixed", &RunConfig::keep_tokens_separator),
        opt_text("secondary_separator", kData, "TEXT", "joins tags that move together", &RunConfig::secondary_separator),
        opt_text("caption_prefix", kData, "TEXT", "prepended to every caption", &RunConfig::caption_prefix),
        opt_text("caption_suffix", kData, "TEXT", "appended to every caption", &RunConfig::caption_suffix),
        real("caption_dropout_rate", kData, "drop the whole caption with this rate", &RunConfig::caption_dropout_rate, 0, 1),
        integer("caption_dropout_every_n_epochs", kData, "drop every caption every N epochs",
                &RunConfig::caption_dropout_every_n_epochs, 0, kIntMax),
        real("caption_tag_dropout_rate", kData, "drop each tag with this rate", &RunConfig::caption_tag_dropout_rate, 0, 1),
        flag("flip_aug", kData, "random horizontal flips", &RunConfig::flip_aug),
        flag("random_crop", kData, "random crop instead of centre crop", &RunConfig::random_crop),
        flag("color_aug", kData, "(refused: color augmentation is not implemented)", &RunConfig::color_aug),
        real("prior_loss_weight", kData, "loss weight of regularisation images", &RunConfig::prior_loss_weight),
        flag("cache_latents", kData, "encode every image once before training (in RAM)", &RunConfig::cache_latents),
        flag("cache_latents_to_disk", kData, "... and keep them in <output_dir>/latent_cache for later runs",
             &RunConfig::cache_latents_to_disk),
        integer("vae_batch_size", kData, "images per VAE call when caching", &RunConfig::vae_batch_size, 1, 1 << 12),
        flag("cache_text_encoder_outputs", kData, "encode every caption once (frozen text encoder, fixed captions)",
             &RunConfig::cache_text_encoder_outputs),
        flag("cache_text_encoder_outputs_to_disk", kData, "... kept in <output_dir>/text_encoder_cache",
             &RunConfig::cache_text_encoder_outputs_to_disk),
        integer("max_data_loader_n_workers", kData, "loader threads (at most the cores)",
                &RunConfig::max_data_loader_n_workers, 0, 1024),
        // ---- network ----
        text("network_module", kNetwork, "MODULE", "networks.lora or lycoris.kohya (required)", &RunConfig::network_module),
        make("network_dim", kNetwork, Kind::value, "INT", "LoRA rank (kohya's default 4) [1, 4096]",
             [](RunConfig& c, const std::string& w, const Values& v) {
                 c.network_dim = gl::cli::parse_int<int>(w, one(w, v), 1, 4096);
             },
             true),
        real("network_alpha", kNetwork, "LoRA alpha (scale alpha / dim; 0: alpha = dim)", &RunConfig::network_alpha),
        opt_real("network_dropout", kNetwork, "dropout on each LoRA's down output", &RunConfig::network_dropout, 0, 1),
        list("network_args", kNetwork,
             "conv_dim=N conv_alpha=A (LoCon), rank_dropout=P, module_dropout=P; lycoris.kohya: algo=<type>, "
             "preset=full|attn-mlp|..., dora_wd=True, use_tucker=True, a type's own args, ...",
             &RunConfig::network_args),
        flag("network_train_unet_only", kNetwork, "train the UNet's LoRA only", &RunConfig::network_train_unet_only),
        flag("network_train_text_encoder_only", kNetwork, "train the text encoder's LoRA only",
             &RunConfig::network_train_text_encoder_only),
        opt_text("network_weights", kNetwork, "PATH", "continue from this LoRA file", &RunConfig::network_weights),
        flag("dim_from_weights", kNetwork, "take the rank (and alpha) from --network_weights",
             &RunConfig::dim_from_weights),
        opt_text("training_comment", kNetwork, "TEXT", "stored in the file's metadata", &RunConfig::training_comment),
        // ---- optimizer ----
        text("optimizer_type", kOptimizer, "NAME", "AdamW (default), AdamW8bit, Lion, Adafactor, Prodigy "
             "(or their Python class paths)", &RunConfig::optimizer_type),
        list("optimizer_args", kOptimizer, "the optimizer class's arguments: weight_decay=0.01 betas=0.9,0.99",
             &RunConfig::optimizer_args),
        flag("use_8bit_adam", kOptimizer, "AdamW8bit (kohya's old flag)", &RunConfig::use_8bit_adam),
        flag("use_lion_optimizer", kOptimizer, "Lion (kohya's old flag)", &RunConfig::use_lion_optimizer),
        real("learning_rate", kOptimizer, "learning rate (kohya's default 2e-6)", &RunConfig::learning_rate),
        opt_real("unet_lr", kOptimizer, "the UNet's learning rate (default: --learning_rate)", &RunConfig::unet_lr),
        make("text_encoder_lr", kOptimizer, Kind::list, "NUMBER",
             "the text encoder's learning rate (default: --learning_rate; 0 leaves it untrained)",
             [](RunConfig& c, const std::string& w, const Values& v) {
                 if (v.size() > 1) throw UsageError(w + ": SD1.5 has one text encoder: give one learning rate");
                 if (v.empty()) c.text_encoder_lr.reset();
                 else c.text_encoder_lr = parse_number(w, v[0], 0, kInf);
             },
             true),
        real("max_grad_norm", kOptimizer, "clip the gradients' global norm (0: no clipping)", &RunConfig::max_grad_norm),
        text("lr_scheduler", kOptimizer, "NAME", "constant (default), constant_with_warmup, linear, cosine, "
             "cosine_with_restarts, polynomial, adafactor", &RunConfig::lr_scheduler),
        make("lr_warmup_steps", kOptimizer, Kind::value, "N|RATIO", "warm-up steps, or a ratio of the steps below 1 "
             "(or '10%')",
             [](RunConfig& c, const std::string& w, const Values& v) {
                 std::string s = one(w, v);
                 WarmupSteps ws;
                 if (!s.empty() && s.back() == '%') {
                     ws.ratio = true;
                     ws.value = gl::cli::parse_real<double>(w, s.substr(0, s.size() - 1), 0, 100) / 100.0;
                 } else {
                     const double x = gl::cli::parse_real<double>(w, s, 0, 1e12);
                     ws.ratio = x < 1;
                     ws.value = ws.ratio ? x : double(gl::cli::parse_int<int64_t>(w, s, 0, int64_t(1e12)));
                 }
                 c.lr_warmup_steps = ws;
             },
             true),
        integer("lr_scheduler_num_cycles", kOptimizer, "restarts of cosine_with_restarts",
                &RunConfig::lr_scheduler_num_cycles, 1, 1 << 20),
        real("lr_scheduler_power", kOptimizer, "power of polynomial, > 0", &RunConfig::lr_scheduler_power),
        // ---- training ----
        integer<int64_t>("max_train_steps", kTraining, "optimizer steps (kohya's default 1600)",
                         &RunConfig::max_train_steps, 1, int64_t(1) << 40),
        opt_integer("max_train_epochs", kTraining, "epochs (overrides --max_train_steps)", &RunConfig::max_train_epochs, 1),
        integer("gradient_accumulation_steps", kTraining, "batches per optimizer step",
                &RunConfig::gradient_accumulation_steps, 1, 1 << 16),
        make("seed", kTraining, Kind::value, "INT", "seed of every random draw (default: drawn and recorded)",
             [](RunConfig& c, const std::string& w, const Values& v) {
                 c.seed = gl::cli::parse_int<uint64_t>(w, one(w, v), 0, std::numeric_limits<uint64_t>::max());
             },
             true),
        text("mixed_precision", kTraining, "no|fp16|bf16", "weights and activations (no: f32, kohya's default)",
             &RunConfig::mixed_precision),
        flag("full_fp16", kTraining, "fp16 throughout (needs --mixed_precision fp16)", &RunConfig::full_fp16),
        flag("full_bf16", kTraining, "bf16 throughout (needs --mixed_precision bf16)", &RunConfig::full_bf16),
        opt_real("noise_offset", kTraining, "offset noise strength (around 0.1)", &RunConfig::noise_offset),
        opt_real("min_snr_gamma", kTraining, "min-SNR loss weighting gamma (around 5)", &RunConfig::min_snr_gamma),
        text("loss_type", kTraining, "l1|l2|huber", "the loss (default l2)", &RunConfig::loss_type),
        real("huber_c", kTraining, "Huber loss parameter, in (0, 1]", &RunConfig::huber_c, 0, 1),
        real("huber_scale", kTraining, "Huber loss scale, > 0", &RunConfig::huber_scale),
        text("huber_schedule", kTraining, "constant|exponential|snr", "how huber_c follows the timestep",
             &RunConfig::huber_schedule),
        opt_integer("min_timestep", kTraining, "smallest timestep trained", &RunConfig::min_timestep, 0, 1000),
        opt_integer("max_timestep", kTraining, "largest timestep trained (exclusive)", &RunConfig::max_timestep, 0, 1000),
        // ---- memory ----
        flag("gradient_checkpointing", kMemory, "recompute every block in the backward pass (less memory)",
             &RunConfig::gradient_checkpointing),
        opt_text("vram_limit", kMemory, "SIZE|auto", "auto-fit the run into this much device memory (8G; auto: "
                 "the free memory): recompute, micro-batch with accumulation, and the --allow_* changes",
                 &RunConfig::vram_limit),
        flag("allow_8bit_optimizer", kMemory, "auto-fit may switch AdamW to AdamW8bit", &RunConfig::allow_8bit_optimizer),
        flag("allow_cached_text_encoder", kMemory, "auto-fit may cache the frozen text encoder's outputs",
             &RunConfig::allow_cached_text_encoder),
        flag("allow_unet_only", kMemory, "auto-fit may leave the text encoder untrained", &RunConfig::allow_unet_only),
        flag("fp8_base", kMemory, "the frozen UNet and text encoder in fp8 e4m3, scaled per output channel",
             &RunConfig::fp8_base),
        flag("fp8_base_unet", kMemory, "the frozen UNet alone in fp8 e4m3", &RunConfig::fp8_base_unet),
        flag("int8_base", kMemory, "the frozen UNet and text encoder in int8, scaled per output channel (not kohya's)",
             &RunConfig::int8_base),
        flag("int8_base_unet", kMemory, "the frozen UNet alone in int8 (not kohya's)", &RunConfig::int8_base_unet),
        make("backend", kMemory, Kind::value, "auto|cpu|cuda", "where the graphs run (auto: CUDA when available)",
             [](RunConfig& c, const std::string& w, const Values& v) {
                 try {
                     c.backend = gl::parse_backend(one(w, v));
                 } catch (const gl::cli::UsageError&) {
                     throw;
                 } catch (const gl::Error& e) {
                     throw UsageError(gl::cat(w, ": ", e.what()));
                 }
             }),
        // ---- output ----
        text("output_dir", kOutput, "PATH", "where files are written (required)", &RunConfig::output_dir),
        opt_text("output_name", kOutput, "NAME", "file name stem (default: last / at / epoch, as kohya)",
                 &RunConfig::output_name),
        text("save_model_as", kOutput, "safetensors", "file format (safetensors only)", &RunConfig::save_model_as),
        opt_text("save_precision", kOutput, "float|fp16|bf16", "precision of the saved LoRA (default: as trained, "
                 "float)", &RunConfig::save_precision),
        opt_integer("save_every_n_steps", kOutput, "save every N steps", &RunConfig::save_every_n_steps, 1),
        opt_integer("save_every_n_epochs", kOutput, "save every N epochs", &RunConfig::save_every_n_epochs, 1),
        opt_integer("save_n_epoch_ratio", kOutput, "save at least N times over the run", &RunConfig::save_n_epoch_ratio, 1),
        opt_integer("save_last_n_steps", kOutput, "keep the step saves of the last N steps", &RunConfig::save_last_n_steps, 1),
        opt_integer("save_last_n_epochs", kOutput, "keep the last N epoch saves", &RunConfig::save_last_n_epochs, 1),
        opt_integer("save_last_n_steps_state", kOutput, "the same for states", &RunConfig::save_last_n_steps_state, 1),
        opt_integer("save_last_n_epochs_state", kOutput, "the same for states", &RunConfig::save_last_n_epochs_state, 1),
        flag("save_state", kOutput, "with every save, a state folder to --resume from", &RunConfig::save_state),
        flag("save_state_on_train_end", kOutput, "a state folder at the end", &RunConfig::save_state_on_train_end),
        opt_text("resume", kOutput, "FOLDER", "continue from a state folder exactly where it stopped", &RunConfig::resume),
        flag("no_metadata", kOutput, "write only the network's keys into the file", &RunConfig::no_metadata),
        opt_text("metadata_title", kOutput, "TEXT", "modelspec.title", &RunConfig::metadata_title),
        opt_text("metadata_author", kOutput, "TEXT", "modelspec.author", &RunConfig::metadata_author),
        opt_text("metadata_description", kOutput, "TEXT", "modelspec.description", &RunConfig::metadata_description),
        opt_text("metadata_license", kOutput, "TEXT", "modelspec.license", &RunConfig::metadata_license),
        opt_text("metadata_tags", kOutput, "TEXT", "modelspec.tags", &RunConfig::metadata_tags),
        // ---- sampling ----
        opt_integer("sample_every_n_steps", kSampling, "sample images every N steps", &RunConfig::sample_every_n_steps,
                    std::numeric_limits<int>::min()),
        opt_integer("sample_every_n_epochs", kSampling, "sample images every N epochs (overrides steps)",
                    &RunConfig::sample_every_n_epochs, std::numeric_limits<int>::min()),
        opt_text("sample_prompts", kSampling, "FILE", "kohya's prompt file (--n --w --h --d --l --s per line)",
                 &RunConfig::sample_prompts),
        text("sample_sampler", kSampling, "NAME", "sampler (kohya's names; default ddim)", &RunConfig::sample_sampler),
        flag("sample_at_first", kSampling, "sample before the first step", &RunConfig::sample_at_first),
        // ---- run ----
        flag("dry_run", kRun, "print the plan (dataset, steps, memory) and stop before loading weights",
             &RunConfig::dry_run),
    };
    for (const char* f : {"xformers", "sdpa", "mem_eff_attn"})
        t.push_back(noted(f, Kind::flag, "not needed: sdtrain's attention is memory-efficient on every GPU"));
    t.push_back(noted("lowram", Kind::flag, "not needed: weights stream from the mapped file"));
    t.push_back(noted("highvram", Kind::flag, "not needed: the memory plan decides"));
    t.push_back(noted("persistent_data_loader_workers", Kind::flag, "not needed: the loader threads live for the run"));
    t.push_back(noted("tokenizer_cache_dir", Kind::value, "not needed: the CLIP tokenizer is built in"));
    t.push_back(noted("skip_cache_check", Kind::flag, "not needed: cache files are checked by their key"));
    t.push_back(noted("use_safetensors", Kind::flag, "sdtrain always writes safetensors"));

    const std::string logging = "no TensorBoard / W&B: sdtrain writes its metrics and report into --output_dir";
    for (const char* f : {"logging_dir", "log_with", "log_prefix", "log_tracker_name", "wandb_run_name",
                          "log_tracker_config", "wandb_api_key"})
        t.push_back(refused(f, Kind::value, logging));
    t.push_back(refused("log_config", Kind::flag, logging));
    for (const char* f : {"huggingface_repo_id", "huggingface_repo_type", "huggingface_path_in_repo",
                          "huggingface_token", "huggingface_repo_visibility"})
        t.push_back(refused(f, Kind::value, "no uploads"));
    for (const char* f : {"save_state_to_huggingface", "resume_from_huggingface", "async_upload"})
        t.push_back(refused(f, Kind::flag, "no uploads"));
    t.push_back(refused("v2", Kind::flag, "sdtrain trains SD1.x models"));
    t.push_back(refused("vae", Kind::value, "a separate VAE file"));
    t.push_back(refused("in_json", Kind::value, "fine-tuning metadata: use folders or --dataset_config"));
    t.push_back(refused("dataset_repeats", Kind::value, "fine-tuning metadata", "1"));
    for (const char* f : {"enable_wildcard", "weighted_captions", "alpha_mask", "masked_loss",
                          "noise_offset_random_strength", "ip_noise_gamma_random_strength", "zero_terminal_snr",
                          "debiased_estimation_loss", "scale_v_pred_loss_like_noise_pred",
                          "deepspeed", "ddp_gradient_as_bucket_view", "ddp_static_graph", "torch_compile",
                          "cpu_offload_checkpointing", "fused_backward_pass", "skip_until_initial_step",
                          "debug_dataset", "cache_info"})
        t.push_back(refused(f, Kind::flag, "not implemented"));
    for (const char* f : {"face_crop_aug_range", "conditioning_data_dir", "adaptive_noise_scale",
                          "multires_noise_iterations", "ip_noise_gamma", "v_pred_like_loss", "scale_weight_norms",
                          "lr_scheduler_type", "lr_decay_steps", "lr_scheduler_timescale", "lr_scheduler_min_lr_ratio",
                          "ddp_timeout", "initial_epoch", "initial_step", "validation_seed", "validation_split",
                          "validate_every_n_steps", "validate_every_n_epochs", "max_validation_steps", "dataset_class",
                          "resize_interpolation", "zero_stage", "offload_optimizer_device", "offload_param_device"})
        t.push_back(refused(f, Kind::value, "not implemented"));
    t.push_back(refused("token_warmup_min", Kind::value, "not implemented", "1"));
    t.push_back(refused("token_warmup_step", Kind::value, "not implemented"));
    t.push_back(refused("multires_noise_discount", Kind::value, "not implemented", "0.3"));
    t.push_back(refused("dynamo_backend", Kind::value, "not implemented", "inductor"));
    for (const char* f : {"lr_scheduler_args", "base_weights", "base_weights_multiplier"})
        t.push_back(refused(f, Kind::list, "not implemented"));
    return t;
}

}  // namespace

const std::vector<Option>& option_table() {
    static const std::vector<Option> t = build();
    return t;
}

const Option* find_option(const std::string& name) {
    for (const Option& o : option_table())
        if (o.name == name) return &o;
    return nullptr;
}

}  // namespace sdtrain
