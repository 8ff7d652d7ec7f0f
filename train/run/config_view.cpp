#include "train/run/config_view.h"

#include "ggml-lite/core/error.h"
#include "train/run/metadata.h"

namespace train {

namespace {

std::string text(bool b) { return b ? "true" : "false"; }
std::string text(int v) { return std::to_string(v); }
std::string text(int64_t v) { return std::to_string(v); }
std::string text(double v) { return py_float(v); }
std::string text(const std::string& s) { return s; }
std::string text(const std::vector<std::string>& v) {
    std::string s;
    for (const std::string& x : v) s += (s.empty() ? "" : " ") + x;
    return s.empty() ? "None" : s;
}
template <class T>
std::string text(const std::optional<T>& v) {
    return v ? text(*v) : "None";
}
std::string text(const std::optional<uint64_t>& v) { return v ? std::to_string(*v) : "None"; }

}  // namespace

std::vector<ConfigSection> config_sections(const RunConfig& c) {
    const std::string res = c.resolution ? gl::cat((*c.resolution)[0], ",", (*c.resolution)[1]) : "None";
    const std::string warmup = c.lr_warmup_steps.ratio ? py_float(c.lr_warmup_steps.value)
                                                       : std::to_string(int64_t(c.lr_warmup_steps.value));
    return {
        {"Model",
         {{"pretrained_model_name_or_path", c.pretrained_model_name_or_path},
          {"v_parameterization", text(c.v_parameterization)},
          {"clip_skip", text(c.clip_skip)},
          {"max_token_length", text(c.max_token_length)},
          {"no_half_vae", text(c.no_half_vae)}}},
        {"Data",
         {{"train_data_dir", text(c.train_data_dir)},
          {"reg_data_dir", text(c.reg_data_dir)},
          {"dataset_config", text(c.dataset_config)},
          {"resolution", res},
          {"train_batch_size", text(c.train_batch_size)},
          {"enable_bucket", text(c.enable_bucket)},
          {"min_bucket_reso", text(c.min_bucket_reso)},
          {"max_bucket_reso", text(c.max_bucket_reso)},
          {"bucket_reso_steps", text(c.bucket_reso_steps)},
          {"bucket_no_upscale", text(c.bucket_no_upscale)},
          {"caption_extension", c.caption_extension},
          {"shuffle_caption", text(c.shuffle_caption)},
          {"caption_separator", c.caption_separator},
          {"keep_tokens", text(c.keep_tokens)},
          {"keep_tokens_separator", c.keep_tokens_separator},
          {"secondary_separator", text(c.secondary_separator)},
          {"caption_prefix", text(c.caption_prefix)},
          {"caption_suffix", text(c.caption_suffix)},
          {"caption_dropout_rate", text(c.caption_dropout_rate)},
          {"caption_dropout_every_n_epochs", text(c.caption_dropout_every_n_epochs)},
          {"caption_tag_dropout_rate", text(c.caption_tag_dropout_rate)},
          {"flip_aug", text(c.flip_aug)},
          {"random_crop", text(c.random_crop)},
          {"prior_loss_weight", text(c.prior_loss_weight)},
          {"cache_latents", text(c.cache_latents)},
          {"cache_latents_to_disk", text(c.cache_latents_to_disk)},
          {"vae_batch_size", text(c.vae_batch_size)},
          {"cache_text_encoder_outputs", text(c.cache_text_encoder_outputs)},
          {"cache_text_encoder_outputs_to_disk", text(c.cache_text_encoder_outputs_to_disk)},
          {"max_data_loader_n_workers", text(c.max_data_loader_n_workers)}}},
        {"Network",
         {{"network_module", c.network_module},
          {"network_dim", text(c.network_dim)},
          {"network_alpha", text(c.network_alpha)},
          {"network_dropout", text(c.network_dropout)},
          {"network_args", text(c.network_args)},
          {"network_train_unet_only", text(c.network_train_unet_only)},
          {"network_train_text_encoder_only", text(c.network_train_text_encoder_only)},
          {"network_weights", text(c.network_weights)},
          {"dim_from_weights", text(c.dim_from_weights)},
          {"training_comment", text(c.training_comment)}}},
        {"Optimizer",
         {{"optimizer_type", c.optimizer().name()},
          {"optimizer_args", text(c.optimizer_args)},
          {"learning_rate", text(c.learning_rate)},
          {"unet_lr", text(c.unet_lr)},
          {"text_encoder_lr", text(c.text_encoder_lr)},
          {"max_grad_norm", text(c.max_grad_norm)},
          {"lr_scheduler", c.lr_scheduler},
          {"lr_warmup_steps", warmup},
          {"lr_scheduler_num_cycles", text(c.lr_scheduler_num_cycles)},
          {"lr_scheduler_power", text(c.lr_scheduler_power)}}},
        {"Training",
         {{"max_train_steps", text(c.max_train_steps)},
          {"max_train_epochs", text(c.max_train_epochs)},
          {"gradient_accumulation_steps", text(c.gradient_accumulation_steps)},
          {"seed", text(c.seed)},
          {"mixed_precision", c.mixed_precision},
          {"full_fp16", text(c.full_fp16)},
          {"full_bf16", text(c.full_bf16)},
          {"noise_offset", text(c.noise_offset)},
          {"min_snr_gamma", text(c.min_snr_gamma)},
          {"loss_type", c.loss_type},
          {"huber_c", text(c.huber_c)},
          {"huber_scale", text(c.huber_scale)},
          {"huber_schedule", c.huber_schedule},
          {"min_timestep", text(c.min_timestep)},
          {"max_timestep", text(c.max_timestep)}}},
        {"Memory",
         {{"gradient_checkpointing", text(c.gradient_checkpointing)},
          {"vram_limit", text(c.vram_limit)},
          {"allow_8bit_optimizer", text(c.allow_8bit_optimizer)},
          {"allow_cached_text_encoder", text(c.allow_cached_text_encoder)},
          {"allow_unet_only", text(c.allow_unet_only)},
          {"fp8_base", text(c.fp8_base)},
          {"fp8_base_unet", text(c.fp8_base_unet)},
          {"int8_base", text(c.int8_base)},
          {"int8_base_unet", text(c.int8_base_unet)},
          {"backend", gl::backend_name(c.backend)}}},
        {"Output",
         {{"output_dir", c.output_dir},
          {"output_name", text(c.output_name)},
          {"save_model_as", c.save_model_as},
          {"save_precision", text(c.save_precision)},
          {"save_every_n_steps", text(c.save_every_n_steps)},
          {"save_every_n_epochs", text(c.save_every_n_epochs)},
          {"save_n_epoch_ratio", text(c.save_n_epoch_ratio)},
          {"save_last_n_steps", text(c.save_last_n_steps)},
          {"save_last_n_epochs", text(c.save_last_n_epochs)},
          {"save_last_n_steps_state", text(c.save_last_n_steps_state)},
          {"save_last_n_epochs_state", text(c.save_last_n_epochs_state)},
          {"save_state", text(c.save_state)},
          {"save_state_on_train_end", text(c.save_state_on_train_end)},
          {"resume", text(c.resume)},
          {"no_metadata", text(c.no_metadata)}}},
        {"Sampling",
         {{"sample_every_n_steps", text(c.sample_every_n_steps)},
          {"sample_every_n_epochs", text(c.sample_every_n_epochs)},
          {"sample_prompts", text(c.sample_prompts)},
          {"sample_sampler", c.sample_sampler},
          {"sample_at_first", text(c.sample_at_first)}}},
    };
}

}  // namespace train
