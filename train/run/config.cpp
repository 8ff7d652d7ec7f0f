#include "train/run/config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>

#include "ggml-lite/core/autofit.h"
#include "ggml-lite/core/error.h"
#include "data/resize.h"
#include "lora/network_args.h"
#include "optim/descriptor.h"
#include "optim/kohya_schedule.h"

namespace train {

namespace {
// kohya's get_scheduler_fix over this run's options (optim/kohya_schedule.h). base_lr: the optimizer's
// default lr (--learning_rate), which polynomial divides its absolute lr_end by and cosine_with_min_lr
// its min_lr; Adafactor with a relative step computes its own lr: the factor stays 1 (kohya's
// AdafactorSchedule).
optim::LrSchedule schedule_for(const RunConfig& c, int64_t total_steps, std::vector<std::string>* notes,
                               const std::vector<double>* group_lrs = nullptr) {
    optim::KohyaScheduleArgs a;
    a.lr_scheduler = c.lr_scheduler;
    a.lr_scheduler_type = c.lr_scheduler_type;
    a.lr_scheduler_args = c.lr_scheduler_args;
    a.warmup_steps = c.lr_warmup_steps.steps(total_steps);
    a.decay_steps = c.lr_decay_steps.steps(total_steps);
    a.num_cycles = c.lr_scheduler_num_cycles;
    a.power = c.lr_scheduler_power;
    if (c.lr_scheduler_timescale) a.timescale = *c.lr_scheduler_timescale;
    a.min_lr_ratio = c.lr_scheduler_min_lr_ratio;
    a.total_steps = total_steps;
    a.base_lr = c.learning_rate;
    a.schedule_free = optim::lower(c.optimizer().name()).ends_with("schedulefree");
    if (group_lrs) {
        a.group_lrs = *group_lrs;
    } else {
        if (c.train_unet()) a.group_lrs.push_back(c.unet_learning_rate());
        if (c.train_text_encoder()) a.group_lrs.push_back(c.text_encoder_learning_rate());
    }
    return optim::kohya_schedule(a, notes);
}
}  // namespace


namespace {

std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    return s;
}

bool one_of(const std::string& v, std::initializer_list<const char*> set) {
    return std::any_of(set.begin(), set.end(), [&](const char* s) { return v == s; });
}

// kohya's --sample_sampler choices.
constexpr std::initializer_list<const char*> kSamplers = {
    "ddim", "pndm", "lms", "euler", "euler_a", "heun", "dpm_2", "dpm_2_a", "dpmsolver", "dpmsolver++", "dpmsingle",
    "k_lms", "k_euler", "k_euler_a", "k_dpm_2", "k_dpm_2_a"};

void check_rate(const char* name, double v) {
    GL_CHECK(std::isfinite(v) && v >= 0.0 && v < 1.0, "--", name, " must be in [0, 1), got ", v);
}

// A number the run computes in float: finite there, and not a nonzero value float rounds to 0.
void check_float(const char* name, double v, double lo) {
    const double size = std::fabs(v);
    GL_CHECK(std::isfinite(v) && v >= lo && size <= std::numeric_limits<float>::max() &&
                 (v == 0 || size >= std::numeric_limits<float>::denorm_min()),
             "--", name, " ", v, " must be a finite number >= ", lo, " that a 32-bit float holds (the run computes "
             "it in one)");
}

void check_positive(const char* name, const std::optional<int>& v) {
    GL_CHECK(!v || *v >= 1, "--", name, " must be >= 1, got ", v.value_or(0));
}

// kohya names its files <output_name>.safetensors, <output_name>-step00000100-state, ... in
// --output_dir: the name must be one file name, short enough for every name made from it.
void check_output_name(const std::string& n) {
    // The longest name made from it, a step save's temporary file ("-step<13 digits>.safetensors.tmp-"
    // <host (64)>-<pid>-XXXXXX), adds 114 bytes; a file name holds 255.
    constexpr size_t kLongest = 128;
    GL_CHECK(!n.empty() && n != "." && n != ".." && n.find('/') == std::string::npos &&
                 n.find('\0') == std::string::npos,
             "--output_name must be a file name (not empty, '.' or '..', without '/' or NUL), got '", n, "'");
    GL_CHECK(n.size() <= kLongest, "--output_name is ", n.size(), " bytes long; the files named after it need it at "
             "most ", kLongest, " (a file name holds 255)");
}

}  // namespace

int64_t WarmupSteps::steps(int64_t total) const {
    return ratio ? optim::warmup_steps_from_ratio(value, total) : int64_t(value);
}

std::vector<std::pair<std::string, std::string>> parse_network_args(const std::vector<std::string>& args) {
    std::vector<std::pair<std::string, std::string>> out;
    for (const std::string& a : args) {
        const size_t eq = a.find('=');
        GL_CHECK(eq != std::string::npos && eq > 0, "--network_args: '", a, "' is not key=value");
        const std::string key = a.substr(0, eq), value = a.substr(eq + 1);
        // kohya's dict: a key given again keeps its place and takes the later value.
        const auto it = std::find_if(out.begin(), out.end(), [&](const auto& kv) { return kv.first == key; });
        if (it != out.end()) it->second = value;
        else out.emplace_back(key, value);
    }
    return out;
}

void RunConfig::note(const std::string& text) {
    if (std::find(notes.begin(), notes.end(), text) == notes.end()) notes.push_back(text);
}

void RunConfig::validate() {
    GL_CHECK(!pretrained_model_name_or_path.empty(), "--pretrained_model_name_or_path is required");
    GL_CHECK(!output_dir.empty(), "--output_dir is required");
    GL_CHECK(!network_module.empty(), "--network_module is required (sdtrain trains networks.lora and lycoris.kohya)");
    const std::vector<std::string>& modules = lora::network_modules();
    GL_CHECK(std::find(modules.begin(), modules.end(), network_module) != modules.end(), "--network_module ",
             network_module, " is not supported: sdtrain trains networks.lora (LoRA; LoCon through --network_args "
             "conv_dim=N conv_alpha=A) and lycoris.kohya (--network_args algo=<type>, dora_wd=True)");
    if (output_name) check_output_name(*output_name);
    // The filter's name is checked here, before any file is opened (the dataset reads it again).
    if (resize_interpolation) (void)data::parse_interpolation(*resize_interpolation, "--resize_interpolation");

    // Data: one source.
    GL_CHECK(!(dataset_config && (train_data_dir || reg_data_dir)),
             "--dataset_config and --train_data_dir / --reg_data_dir were both given: the dataset config names the "
             "image folders (kohya ignores the folder options then; sdtrain refuses the contradiction)");
    GL_CHECK(!(dataset_config && in_json),
             "--dataset_config and --in_json were both given: a dataset config names its metadata files with "
             "metadata_file (kohya ignores --in_json then; sdtrain refuses the contradiction)");
    GL_CHECK(!(in_json && reg_data_dir),
             "--reg_data_dir with --in_json: kohya's fine-tuning dataset has no regularisation images (it ignores the "
             "folder); sdtrain refuses it");
    GL_CHECK(dataset_config || train_data_dir || in_json,
             "no dataset: give --train_data_dir, --in_json or --dataset_config");
    GL_CHECK(dataset_config || resolution, "--resolution is required with --train_data_dir or --in_json (kohya: "
                                           "'resolution is required')");
    GL_CHECK(!resolution || ((*resolution)[0] >= 1 && (*resolution)[1] >= 1), "--resolution must be positive");
    GL_CHECK(train_batch_size >= 1, "--train_batch_size must be >= 1");
    GL_CHECK(min_bucket_reso >= 1 && max_bucket_reso >= min_bucket_reso && bucket_reso_steps >= 1,
             "bucket options: need 1 <= --min_bucket_reso <= --max_bucket_reso and --bucket_reso_steps >= 1");
    check_rate("caption_dropout_rate", caption_dropout_rate);
    check_rate("caption_tag_dropout_rate", caption_tag_dropout_rate);
    GL_CHECK(keep_tokens >= 0 && caption_dropout_every_n_epochs >= 0,
             "--keep_tokens and --caption_dropout_every_n_epochs must be >= 0");
    check_float("prior_loss_weight", prior_loss_weight, 0);
    if (caption_extension.empty())
        note("--caption_extension '': a caption is the file named as its image without the extension (as kohya)");
    GL_CHECK(vae_batch_size >= 1, "--vae_batch_size must be >= 1");
    GL_CHECK(max_data_loader_n_workers >= 0, "--max_data_loader_n_workers must be >= 0");
    if (cache_latents_to_disk && !cache_latents) {
        cache_latents = true;
        note("--cache_latents_to_disk turns --cache_latents on (as kohya)");
    }
    GL_CHECK(!(cache_latents && random_crop), "--cache_latents cannot be used with --random_crop (the crop changes "
                                              "every step)");
    GL_CHECK(!(cache_latents && color_aug), "--cache_latents cannot be used with --color_aug (the colours change "
                                            "every step; kohya: when caching latents, either color_aug or random_crop "
                                            "cannot be used)");
    if (cache_text_encoder_outputs_to_disk && !cache_text_encoder_outputs) {
        cache_text_encoder_outputs = true;
        note("--cache_text_encoder_outputs_to_disk turns --cache_text_encoder_outputs on");
    }

    // Logging (kohya's prepare_accelerator: --logging_dir alone means TensorBoard). GUIs write ''
    // for unset: no logging, as kohya then makes no tracker.
    if (log_with && log_with->empty()) log_with.reset();
    if (logging_dir && logging_dir->empty()) logging_dir.reset();
    if (log_with) {
        GL_CHECK(*log_with == "tensorboard" || *log_with == "all" || *log_with == "wandb",
                 "--log_with must be tensorboard, wandb or all (kohya's choices), got '", *log_with, "'");
        GL_CHECK(*log_with != "wandb", "--log_with wandb: W&B needs the network; sdtrain logs to TensorBoard "
                                       "(--logging_dir FOLDER)");
        GL_CHECK(logging_dir, "--log_with ", *log_with,
                 ": logging_dir is required when log_with is tensorboard (kohya's rule): add --logging_dir FOLDER");
        if (*log_with == "all") note("--log_with all: TensorBoard only (W&B needs the network)");
    }
    if (!logging_dir && (log_prefix || log_tracker_name))
        note("--log_prefix / --log_tracker_name name TensorBoard's folder: no effect without --logging_dir");

    // Model.
    GL_CHECK(!clip_skip || *clip_skip >= 1, "--clip_skip must be >= 1");
    GL_CHECK(!max_token_length || *max_token_length == 150 || *max_token_length == 225,
             "--max_token_length must be 150 or 225 (75 when not given), got ", max_token_length.value_or(0));

    // Network.
    GL_CHECK(!network_dim || *network_dim >= 1, "--network_dim must be >= 1");
    check_float("network_alpha", network_alpha, 0);
    if (network_dropout) check_rate("network_dropout", *network_dropout);
    GL_CHECK(!(network_train_unet_only && network_train_text_encoder_only),
             "--network_train_unet_only and --network_train_text_encoder_only contradict each other");
    GL_CHECK(!dim_from_weights || network_weights, "--dim_from_weights needs --network_weights");
    lora_config();  // checks network_args
    if (scale_weight_norms) {
        check_float("scale_weight_norms", *scale_weight_norms, 0);
        GL_CHECK(*scale_weight_norms == 0 || network_module != "lycoris.kohya",
                 "--scale_weight_norms with lycoris.kohya is not supported (LyCORIS's max norm scales a scalar each "
                 "module holds, which sdtrain's LyCORIS modules do not); networks.lora has kohya's");
        if (*scale_weight_norms == 0) note("--scale_weight_norms 0: no max-norm regularisation (as kohya)");
    }
    for (const std::string& p : base_weights) GL_CHECK(!p.empty(), "--base_weights wants paths, got ''");
    for (double m : base_weights_multiplier)
        check_float("base_weights_multiplier", m, -std::numeric_limits<float>::max());
    if (base_weights_multiplier.size() > base_weights.size())
        note(gl::cat("--base_weights_multiplier holds ", base_weights_multiplier.size(), " values for ",
                     base_weights.size(), " --base_weights files: the ones beyond are ignored (as kohya)"));
    GL_CHECK(!(cache_text_encoder_outputs && train_text_encoder()),
             "--cache_text_encoder_outputs needs a frozen text encoder: add --network_train_unet_only");
    GL_CHECK(!(network_train_text_encoder_only && text_encoder_lr && *text_encoder_lr == 0),
             "--network_train_text_encoder_only with --text_encoder_lr 0 trains nothing");

    // Optimizer and schedule.
    GL_CHECK(!(use_8bit_adam && use_lion_optimizer), "--use_8bit_adam and --use_lion_optimizer contradict each other");
    GL_CHECK(optimizer_type.empty() || !(use_8bit_adam || use_lion_optimizer),
             "--optimizer_type and --", use_8bit_adam ? "use_8bit_adam" : "use_lion_optimizer",
             " were both given (kohya refuses the pair too)");
    check_float("learning_rate", learning_rate, 0);
    check_float("unet_lr", unet_lr.value_or(0), 0);
    check_float("text_encoder_lr", text_encoder_lr.value_or(0), 0);
    check_float("max_grad_norm", max_grad_norm, 0);
    const optim::OptimizerConfig opt = optimizer();  // checks optimizer_type and optimizer_args
    for (const std::string& n : opt.notes) note(n);
    // kohya's get_optimizer warns when D-Adaptation or Prodigy get a first learning rate of 0.1 or
    // less (the text encoder's group comes first when it is trained): their lr scales the step size
    // they estimate, so about 1.0 is meant.
    const std::string opt_name = opt.name();
    const double first_lr = train_text_encoder() ? text_encoder_learning_rate() : unet_learning_rate();
    if ((opt_name.rfind("DAdapt", 0) == 0 || opt_name == "Prodigy") && first_lr <= 0.1)
        note(gl::cat("warning: learning rate ", first_lr, " is too low for ", opt_name,
                     " (kohya: 'If using D-Adaptation or Prodigy, set learning rate around 1.0')"));
    const std::vector<std::string> schedulers = lr_scheduler_names();
    if (std::find(schedulers.begin(), schedulers.end(), lr_scheduler) == schedulers.end()) {
        std::string names;
        for (const std::string& n : schedulers) names += (names.empty() ? "" : ", ") + n;
        gl::fail("--lr_scheduler ", lr_scheduler, " is not supported (", names, ")");
    }
    GL_CHECK(lr_warmup_steps.value >= 0 && (!lr_warmup_steps.ratio || lr_warmup_steps.value <= 1),
             "--lr_warmup_steps must be >= 0 steps or a ratio in [0, 1]");
    if (adafactor_relative_step() && lr_scheduler != "adafactor") {
        note("Adafactor with relative_step=True sets its own learning rate: --lr_scheduler becomes "
                        "adafactor (as kohya)");
        lr_scheduler = "adafactor";
    }
    GL_CHECK(lr_scheduler != "adafactor" || std::string(opt.name()) == "Adafactor",
             "--lr_scheduler adafactor needs --optimizer_type Adafactor");
    GL_CHECK(!(one_of(lr_scheduler, {"constant", "adafactor"}) && lr_scheduler_type.empty() &&
               lr_warmup_steps.value != 0),
             "--lr_scheduler ", lr_scheduler, " does not take --lr_warmup_steps (kohya: 'does not require "
             "num_warmup_steps. Set None or 0'); use constant_with_warmup");
    GL_CHECK(lr_scheduler_num_cycles >= 1, "--lr_scheduler_num_cycles must be >= 1");
    check_float("lr_scheduler_power", lr_scheduler_power, 0);
    GL_CHECK(lr_scheduler_power > 0, "--lr_scheduler_power must be > 0");
    GL_CHECK(lr_decay_steps.value >= 0 && (!lr_decay_steps.ratio || lr_decay_steps.value <= 1),
             "--lr_decay_steps must be >= 0 steps or a ratio in [0, 1]");
    if (lr_scheduler_min_lr_ratio) check_float("lr_scheduler_min_lr_ratio", *lr_scheduler_min_lr_ratio, 0);
    GL_CHECK(lr_scheduler_type.empty() || !adafactor_relative_step(),
             "--lr_scheduler_type with Adafactor's relative_step=True: the optimizer sets its own lr (kohya gives it "
             "no lr for a torch scheduler to scale)");
    // The schedule as the run will build it (over --max_train_steps; epochs may change the count).
    std::vector<std::string> schedule_notes;
    schedule_for(*this, max_train_steps, &schedule_notes);
    for (const std::string& n : schedule_notes) note(n);

    // Training.
    GL_CHECK(max_train_steps >= 1, "--max_train_steps must be >= 1");
    check_positive("max_train_epochs", max_train_epochs);
    GL_CHECK(gradient_accumulation_steps >= 1, "--gradient_accumulation_steps must be >= 1");
    GL_CHECK(one_of(mixed_precision, {"no", "fp16", "bf16"}), "--mixed_precision must be no, fp16 or bf16, got '",
             mixed_precision, "'");
    GL_CHECK(!(full_fp16 && full_bf16), "--full_fp16 and --full_bf16 contradict each other");
    GL_CHECK(!full_fp16 || mixed_precision == "fp16", "--full_fp16 needs --mixed_precision fp16 (kohya: 'full_fp16 "
                                                      "requires mixed precision='fp16'')");
    GL_CHECK(!full_bf16 || mixed_precision == "bf16", "--full_bf16 needs --mixed_precision bf16 (kohya: 'full_bf16 "
                                                      "requires mixed precision='bf16'')");
    if (full_fp16 || full_bf16)
        note("--full_fp16 / --full_bf16: the frozen weights and activations are in half precision; the "
                        "LoRA masters and optimizer state stay f32 (the file is saved in half precision)");
    check_float("noise_offset", noise_offset.value_or(0), 0);
    check_float("min_snr_gamma", min_snr_gamma.value_or(0), 0);
    check_float("huber_c", huber_c, 0);
    check_float("huber_scale", huber_scale, 0);
    // kohya's Huber thresholds: exponential takes -ln(huber_c), snr blends toward it.
    const bool huber_like = one_of(loss_type, {"huber", "smooth_l1"});
    GL_CHECK(!huber_like || (huber_c > 0 && huber_c <= 1), "--huber_c must be in (0, 1] with --loss_type ", loss_type,
             ", got ", huber_c);
    GL_CHECK(!huber_like || huber_scale > 0, "--huber_scale must be > 0 with --loss_type ", loss_type);
    // kohya takes any float for these (a negative one flips or shrinks the variant).
    const double any = -std::numeric_limits<float>::max();
    check_float("adaptive_noise_scale", adaptive_noise_scale.value_or(0), any);
    check_float("multires_noise_discount", multires_noise_discount, any);
    check_float("ip_noise_gamma", ip_noise_gamma.value_or(0), any);
    check_float("v_pred_like_loss", v_pred_like_loss.value_or(0), any);
    // kohya's verify_training_args.
    GL_CHECK(!adaptive_noise_scale || noise_offset, "--adaptive_noise_scale requires --noise_offset (as kohya)");
    GL_CHECK(!scale_v_pred_loss_like_noise_pred || v_parameterization,
             "--scale_v_pred_loss_like_noise_pred can be enabled only with --v_parameterization (as kohya)");
    GL_CHECK(!v_pred_like_loss.value_or(0) || !v_parameterization,
             "--v_pred_like_loss cannot be enabled with --v_parameterization (as kohya)");
    if (zero_terminal_snr && !v_parameterization)
        note("--zero_terminal_snr without --v_parameterization: kohya warns that training will be unexpected "
             "(an epsilon model cannot predict pure noise's signal)");
    if (adaptive_noise_scale && !noise_offset.value_or(0))
        note("--adaptive_noise_scale with --noise_offset 0 adds no offset (as kohya)");
    GL_CHECK(one_of(loss_type, {"l1", "l2", "huber", "smooth_l1"}), "--loss_type must be l1, l2, huber or smooth_l1, got '",
             loss_type, "'");
    GL_CHECK(one_of(huber_schedule, {"constant", "exponential", "snr"}),
             "--huber_schedule must be constant, exponential or snr");
    objective().validate(diffusion::DdpmSchedule::sd15());

    // Memory.
    if (vram_limit && *vram_limit != "auto") gl::parse_bytes(*vram_limit);
    GL_CHECK(!((fp8_base || fp8_base_unet) && (int8_base || int8_base_unet)),
             "--fp8_base(_unet) and --int8_base(_unet) contradict each other: the base is stored one way");
    GL_CHECK(!(fp8_base || fp8_base_unet) || mixed_precision != "no", fp8_base ? "--fp8_base" : "--fp8_base_unet",
             " requires --mixed_precision fp16 or bf16 (kohya asserts it: the unquantized parts compute in the mixed "
             "precision)");
    if (!vram_limit && (allow_8bit_optimizer || allow_cached_text_encoder || allow_unet_only))
        note("--allow_* options only widen what --vram_limit may choose, and what a refused plan suggests");

    // kohya's start (train/run/initial_step.h); its arithmetic needs the dataset.
    GL_CHECK(!(resume && (initial_epoch || initial_step)), "--", initial_step ? "initial_step" : "initial_epoch",
             " with --resume: sdtrain's --resume continues exactly where the state stopped (the data order too), "
             "where kohya's would replace the state's step; leave it out");
    GL_CHECK(!(skip_until_initial_step && gradient_accumulation_steps > 1 && (initial_epoch || initial_step)),
             "--skip_until_initial_step with --gradient_accumulation_steps ", gradient_accumulation_steps,
             ": kohya counts the skip in batches and the epochs in updates, so its step counter would start wrong "
             "(even negative); use --resume from a state, which continues exactly");
    if (initial_step && initial_epoch) note("--initial_step overrides --initial_epoch (as kohya)");
    if (skip_until_initial_step && !initial_step && !initial_epoch)
        note("--skip_until_initial_step: no effect without --initial_step or --initial_epoch (as kohya)");

    // Output.
    GL_CHECK(one_of(save_model_as, {"safetensors", "ckpt", "pt"}), "--save_model_as must be safetensors, ckpt or pt ",
             "(kohya's choices), got '", save_model_as, "'");
    GL_CHECK(!save_precision || one_of(*save_precision, {"float", "fp16", "bf16"}),
             "--save_precision must be float, fp16 or bf16");
    for (const auto& [name, v] : {std::pair{"save_every_n_steps", save_every_n_steps},
                                  {"save_every_n_epochs", save_every_n_epochs},
                                  {"save_n_epoch_ratio", save_n_epoch_ratio},
                                  {"save_last_n_steps", save_last_n_steps},
                                  {"save_last_n_epochs", save_last_n_epochs},
                                  {"save_last_n_steps_state", save_last_n_steps_state},
                                  {"save_last_n_epochs_state", save_last_n_epochs_state}})
        check_positive(name, v);
    GL_CHECK(!(save_last_n_steps || save_last_n_steps_state) || save_every_n_steps,
             "--save_last_n_steps", save_last_n_steps ? "" : "_state", " needs --save_every_n_steps");
    GL_CHECK(!(save_last_n_epochs || save_last_n_epochs_state) || save_every_n_epochs || save_n_epoch_ratio,
             "--save_last_n_epochs", save_last_n_epochs ? "" : "_state", " needs --save_every_n_epochs");
    GL_CHECK(!resume || !resume->empty(), "--resume needs a state folder");

    // Sampling: kohya turns intervals <= 0 off with a warning.
    for (auto* v : {&sample_every_n_steps, &sample_every_n_epochs})
        if (*v && **v <= 0) {
            note(gl::cat(v == &sample_every_n_steps ? "--sample_every_n_steps" : "--sample_every_n_epochs",
                                    " ", **v, " <= 0: no samples at that interval (as kohya)"));
            v->reset();
        }
    GL_CHECK(sample_prompts || !(sample_every_n_steps || sample_every_n_epochs || sample_at_first),
             "sampling (--sample_every_n_steps / --sample_every_n_epochs / --sample_at_first) needs --sample_prompts");
    GL_CHECK(one_of(sample_sampler, kSamplers), "--sample_sampler ", sample_sampler,
             " is not one of kohya's samplers (ddim, pndm, lms, euler, euler_a, heun, dpm_2, dpm_2_a, dpmsolver, "
             "dpmsolver++, dpmsingle, k_lms, k_euler, k_euler_a, k_dpm_2, k_dpm_2_a)");
    if (sample_every_n_steps && sample_every_n_epochs)
        note("--sample_every_n_epochs overrides --sample_every_n_steps (as kohya)");
    for (const std::string& n : lora_config().notes) note(n);  // the network args, refused or noted
}

Precision RunConfig::precision() const {
    return mixed_precision == "fp16" ? Precision::fp16 : mixed_precision == "bf16" ? Precision::bf16 : Precision::fp32;
}

lora::SavePrecision RunConfig::save_dtype() const {
    const std::string p = save_precision.value_or(full_fp16 ? "fp16" : full_bf16 ? "bf16" : "float");
    return p == "fp16" ? lora::SavePrecision::fp16 : p == "bf16" ? lora::SavePrecision::bf16 : lora::SavePrecision::fp32;
}

std::vector<lora::BaseWeightsFile> RunConfig::base_weight_files() const {
    std::vector<lora::BaseWeightsFile> f;
    for (size_t i = 0; i < base_weights.size(); i++)
        f.push_back({base_weights[i], i < base_weights_multiplier.size() ? float(base_weights_multiplier[i]) : 1.0f});
    return f;
}

gl::WeightFormat RunConfig::unet_base_format() const {
    if (fp8_base || fp8_base_unet) return gl::WeightFormat::fp8;
    if (int8_base || int8_base_unet) return gl::WeightFormat::int8;
    return gl::WeightFormat::dense;
}

// kohya: --fp8_base_unet keeps the text encoder in the mixed precision even beside --fp8_base.
gl::WeightFormat RunConfig::text_encoder_base_format() const {
    if (fp8_base_unet || int8_base_unet) return gl::WeightFormat::dense;
    return unet_base_format();
}

bool RunConfig::train_text_encoder() const {
    return !network_train_unet_only && text_encoder_learning_rate() != 0.0;
}

const models::Family& RunConfig::family() const { return v2 ? models::sd2_family() : models::sd15_family(); }

lora::LoraConfig RunConfig::lora_config() const {
    return lora::network_config({network_module, network_dim, network_alpha, network_dropout,
                                 parse_network_args(network_args), &family(), dim_from_weights});
}

optim::OptimizerConfig RunConfig::optimizer() const {
    const std::string type = !optimizer_type.empty() ? optimizer_type
                             : use_8bit_adam         ? "AdamW8bit"
                             : use_lion_optimizer    ? "Lion"
                                                     : "AdamW";
    try {
        return optim::parse_optimizer(type, optimizer_args);
    } catch (const gl::Error& e) {
        gl::fail("--optimizer_type ", type, ": ", e.what());
    }
}

bool RunConfig::adafactor_relative_step() const {
    const optim::OptimizerConfig o = optimizer();
    return lower(o.name()) == "adafactor" && o.flag("relative_step");
}

Objective RunConfig::objective() const {
    Objective o;
    o.prediction = v_parameterization ? diffusion::Prediction::v_prediction : diffusion::Prediction::epsilon;
    o.loss = loss_type == "l1"          ? gl::LossKind::l1
             : loss_type == "huber"     ? gl::LossKind::huber
             : loss_type == "smooth_l1" ? gl::LossKind::smooth_l1
                                        : gl::LossKind::l2;
    o.min_snr_gamma = min_snr_gamma.value_or(0.0);
    o.debiased_estimation = debiased_estimation_loss;
    o.noise_offset = noise_offset.value_or(0.0);
    o.noise_offset_random_strength = noise_offset_random_strength;
    if (o.noise_offset > 0) o.adaptive_noise_scale = adaptive_noise_scale;
    o.multires_noise_iterations = multires_noise_iterations.value_or(0);
    o.multires_noise_discount = multires_noise_discount;
    o.ip_noise_gamma = ip_noise_gamma.value_or(0.0);
    o.ip_noise_gamma_random_strength = ip_noise_gamma_random_strength;
    o.zero_terminal_snr = zero_terminal_snr;
    o.scale_v_pred_loss_like_noise_pred = scale_v_pred_loss_like_noise_pred;
    o.v_pred_like_loss = v_pred_like_loss.value_or(0.0);
    o.min_timestep = min_timestep.value_or(0);
    o.max_timestep = max_timestep.value_or(1000);
    o.huber_schedule = parse_huber_schedule(huber_schedule);
    o.huber_c = huber_c;
    o.huber_scale = huber_scale;
    return o;
}

std::vector<std::string> lr_scheduler_names() {
    std::vector<std::string> n = optim::lr_kind_names();
    n.emplace_back("adafactor");
    return n;
}

optim::LrSchedule lr_schedule(const RunConfig& c, int64_t total_steps) { return schedule_for(c, total_steps, nullptr); }

void check_schedule_groups(const RunConfig& c, int64_t total_steps, const std::vector<double>& group_lrs) {
    schedule_for(c, total_steps, nullptr, &group_lrs);
}

}  // namespace train
