// kohya's noise and loss variants, each as a deterministic CPU reference (given the random values,
// the same output as kohya's function: tests/golden/make_noise_variants_golden.py) and, where it
// draws, the draw from our stream (diffusion::NoiseRng) in a fixed order and a fixed count:
//
//   pyramid noise    --multires_noise_iterations / --multires_noise_discount
//                    (custom_train_functions.pyramid_noise_like)
//   offset noise     --noise_offset with --adaptive_noise_scale, --noise_offset_random_strength
//                    (custom_train_functions.apply_noise_offset, train_util.get_noise_noisy_latents_and_timesteps)
//   input perturbation  --ip_noise_gamma (_random_strength): extra noise in the noisy latents only
//   zero terminal SNR   --zero_terminal_snr (fix_noise_scheduler_betas_for_zero_terminal_snr)
//   loss weights     NetworkTrainer.post_process_loss: min-SNR, --scale_v_pred_loss_like_noise_pred,
//                    --v_pred_like_loss, --debiased_estimation_loss, in kohya's order
//   masked loss      custom_train_functions.apply_masked_loss: the mask averaged down to the latents
//
// Tensors are NHWC f32 (kohya's are NCHW: the same values, another element order).
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "models/diffusion/noise.h"
#include "train/objective.h"

namespace train {

// ---- pyramid noise ----

// Level i of the pyramid for a latent of h x w: max(1, int(h / r^i)) x max(1, int(w / r^i)),
// r = 2 + 2u drawn per level (level 0 is full size whatever r).
struct PyramidLevel {
    int64_t h = 0, w = 0;
    std::vector<float> z;  // [B, h, w, C] N(0, 1)
};
PyramidLevel pyramid_level_size(int64_t h, int64_t w, int level, double r);

// noise [B, h, w, C] += sum_i discount^i * bilinear_upsample(levels[i].z), then divided by its
// standard deviation (unbiased, over the whole micro-batch), as kohya's pyramid_noise_like.
void apply_pyramid_noise(std::span<float> noise, int64_t batch, int64_t h, int64_t w, int64_t channels,
                         double discount, const std::vector<PyramidLevel>& levels);

// The draws: level i reads the stream from a fixed position, rng.counter + i * pyramid_level_draws,
// one uniform (r) then its normals, so the count is fixed whatever sizes r gives and wherever the
// pyramid stops (kohya stops after the first level of side 1); rng moves by pyramid_noise_draws.
std::vector<PyramidLevel> draw_pyramid_levels(int64_t batch, int64_t h, int64_t w, int64_t channels, int iterations,
                                              diffusion::NoiseRng& rng);
uint64_t pyramid_level_draws(int64_t latent_numel);
uint64_t pyramid_noise_draws(int64_t latent_numel, int iterations);

// torch.nn.Upsample(mode="bilinear", align_corners=False) of src [B, h, w, C] to H x W, times
// weight, added into dst [B, H, W, C] (source positions clamped at 0, as torch does).
void add_bilinear_upsampled(std::span<const float> src, int64_t batch, int64_t h, int64_t w, int64_t channels,
                            std::span<float> dst, int64_t H, int64_t W, double weight);

// ---- offset noise ----

// The offset of each (sample, channel) [B * C]: `offset`, or with adaptive_scale
// max(0, offset + adaptive_scale * |mean over h, w of latents[b, :, :, c]|).
std::vector<double> noise_offset_strengths(std::span<const float> latents, int64_t batch, int64_t channels,
                                           double offset, std::optional<double> adaptive_scale);
// noise[b, h, w, c] += strength[b, c] * z[b, c].
void add_noise_offset(std::span<float> noise, int64_t batch, int64_t channels, std::span<const double> strength,
                      std::span<const double> z);

// ---- input perturbation ----

// gamma * z, z ~ N(0, 1) [latent_numel]: what kohya adds to the noise of the noisy latents only
// (the target keeps the plain noise).
std::vector<float> input_perturbation(int64_t latent_numel, double gamma, diffusion::NoiseRng& rng);

// ---- zero terminal SNR (Lin et al. 2023, arXiv:2305.08891) ----

// The schedule with betas rescaled so alpha_bar ends at 0: sqrt(alpha_bar) shifted by its last value
// and scaled back to its first, then betas from the ratios of consecutive alpha_bars. The tables
// follow from the new betas as scaled_linear's do (alpha_bar rounded to f32).
diffusion::DdpmSchedule zero_terminal_snr(const diffusion::DdpmSchedule& s);

// ---- loss weights ----

// kohya's get_snr_scale: snr / (snr + 1), the SNR capped at 1000.
double snr_scale(const diffusion::DdpmSchedule& s, int t);
// The per-sample loss weight of timestep t, kohya's post_process_loss in its order: min-SNR-gamma,
// then snr_scale (scale_v_pred_loss_like_noise_pred), then 1 + v_pred_like_loss / snr_scale
// (add_v_prediction_like_loss adds loss / scale * v_pred_like_loss), then debiased estimation.
// `s` gives the SNR (kohya's all_snr: the schedule before the zero-terminal-SNR fix).
double loss_weight(const Objective& o, const diffusion::DdpmSchedule& s, int t);

// ---- masked loss ----

// The mask [B, H, W] (values in [0, 1]) averaged over factor x factor blocks to the latent's
// [B, H / factor, W / factor]: torch's interpolate(mode="area") at an integer ratio.
std::vector<float> mask_to_latent(std::span<const float> mask, int64_t batch, int64_t H, int64_t W, int64_t factor);

}  // namespace train
