// The training objective (the one owner of that name), as kohya's sd-scripts trains SD1.5 LoRAs:
// what is predicted, the loss and its weights (min-SNR-gamma, debiased estimation), the timestep range, offset noise and
// the Huber thresholds, and its per-step draws: the noise (with optional offset noise), then the
// timesteps (uniform in [min_timestep, max_timestep)), and from the DDPM schedule
// (models/diffusion/noise.h: the diffusion process itself, shared with sampling) the per-sample values
// of a timestep: sqrt(alpha_bar), sqrt(1 - alpha_bar), the loss weight and the Huber threshold.
// The step graph draws the noise itself and looks the per-sample values up by timestep
// (train/step.h); the host draws only the timesteps (draw_step). draw_micro_batch draws
// everything on the host from the same stream: the reference the graph's draws equal.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ggml-lite/core/dtype.h"
#include "ggml-lite/ops/op_kinds.h"
#include "models/diffusion/noise.h"

namespace train {

// Precision of the frozen weights and the activations; LoRA masters and optimizer state are f32
// in every mode, the loss and its reduction f32. fp16 needs dynamic loss scaling (Trainer does it).
// bf16 is the default: every GPU the CUDA backend targets (sm_80 and newer) runs it natively, and
// the CPU backend computes in f32 whatever the storage type.
enum class Precision : uint8_t { bf16, fp16, fp32 };
const char* precision_name(Precision p);
Precision parse_precision(const std::string& s);  // "bf16" | "fp16" | "fp32"; throws otherwise
gl::DType activation_dtype(Precision p);

// kohya's --huber_schedule: how huber_c depends on the timestep.
enum class HuberSchedule : uint8_t { constant, exponential, snr };
HuberSchedule parse_huber_schedule(const std::string& s);

struct Objective {
    diffusion::Prediction prediction = diffusion::Prediction::epsilon;
    gl::LossKind loss = gl::LossKind::l2;
    double min_snr_gamma = 0.0;  // 0: off (every weight 1)
    bool debiased_estimation = false;  // kohya's --debiased_estimation_loss (debiased_weight)
    double noise_offset = 0.0;   // 0: off
    // The noise and loss variants (train/noise_variants.h), kohya's options of the same names.
    bool noise_offset_random_strength = false;   // offset * U[0, 1) per micro-batch
    std::optional<double> adaptive_noise_scale;  // offset += scale * |mean of the latent channel|
    int multires_noise_iterations = 0;           // pyramid noise levels; 0: off
    double multires_noise_discount = 0.3;
    double ip_noise_gamma = 0.0;                 // input perturbation; 0: off
    bool ip_noise_gamma_random_strength = false;  // gamma * U[0, 1) per micro-batch
    bool zero_terminal_snr = false;              // noising on the rescaled betas (weights keep the SNR)
    bool scale_v_pred_loss_like_noise_pred = false;
    double v_pred_like_loss = 0.0;               // 0: off
    int min_timestep = 0, max_timestep = 1000;
    HuberSchedule huber_schedule = HuberSchedule::snr;  // kohya's defaults
    double huber_c = 0.1, huber_scale = 1.0;

    // Throws gl::Error naming the field when a value is out of range for schedule s.
    void validate(const diffusion::DdpmSchedule& s) const;
};

// kohya's huber_c for timestep t (train_util.get_huber_threshold_if_needed):
// constant: huber_c * huber_scale; exponential: exp(-alpha t) * huber_scale with
// alpha = -ln(huber_c) / num_steps; snr: (1 - huber_c) / (1 + sigma)^2 + huber_c with
// sigma = sqrt((1 - ac) / ac).
double huber_c_at(const Objective& o, const diffusion::DdpmSchedule& s, int t);

// Min-SNR-gamma loss weight of timestep t (Hang et al. 2023, arXiv:2303.09556), as kohya's
// sd-scripts library/custom_train_functions.py apply_snr_weight computes it:
// epsilon: min(snr, gamma) / snr; v-prediction: min(snr, gamma) / (snr + 1).
double min_snr_weight(const diffusion::DdpmSchedule& s, int t, double gamma, diffusion::Prediction pred);
// The weight formula on its own, for a given SNR (kohya's formula; see min_snr_weight).
double min_snr_weight_from_snr(double snr, double gamma, diffusion::Prediction pred);

// kohya's --debiased_estimation_loss weight of timestep t (library/custom_train_functions.py
// apply_debiased_estimation, applied after min-SNR): 1 / sqrt(snr) for epsilon, 1 / (snr + 1) for
// v-prediction, the SNR capped at 1000 (t = 0's is about 1175).
double debiased_weight(const diffusion::DdpmSchedule& s, int t, diffusion::Prediction pred);

// Offset noise (kohya's --noise_offset, after crosslabs' "diffusion with offset noise"):
// noise[b, h, w, c] += offset * z[b, c] with z ~ N(0, 1) drawn once per (sample, channel).
// `noise` is NHWC with `batch` samples and `channels` channels (the innermost dimension).
void apply_noise_offset(std::span<float> noise, int64_t batch, int64_t channels, double offset, diffusion::NoiseRng& rng);

// `batch` timesteps uniform in [min_t, max_t) (kohya: torch.randint(min_timestep, max_timestep);
// defaults 0 and 1000). Throws gl::Error unless 0 <= min_t < max_t <= num_steps.
std::vector<int32_t> sample_timesteps(int64_t batch, int min_t, int max_t, int num_steps, diffusion::NoiseRng& rng);

// The schedule the noising follows: s, or with o.zero_terminal_snr its rescaling
// (train/noise_variants.h). The loss weights keep s's SNR (kohya's all_snr is taken before the fix).
diffusion::DdpmSchedule noising_schedule(const Objective& o, const diffusion::DdpmSchedule& s);

// The values a timestep gives each sample: t as the UNet takes it (f32), the noising
// coefficients (from `noising`, noising_schedule's), the loss weight (loss_weight: min-SNR-gamma
// and kohya's other post-process weights, from s's SNR) and, for the huber and smooth_l1 losses,
// the threshold (from `noising`).
struct TimestepValues {
    float timestep, sqrt_ac, sqrt_1m_ac, weight, huber_c;
};
TimestepValues timestep_values(const Objective& o, const diffusion::DdpmSchedule& s,
                               const diffusion::DdpmSchedule& noising, int t);

// One micro-batch's random draws and the per-sample values derived from them.
struct MicroBatch {
    std::vector<int32_t> t;            // [B] timesteps
    std::vector<float> noise;          // [B, h, w, C] N(0, 1) (+ offset noise, pyramid noise): the target's
    std::vector<float> ip_noise;       // [B, h, w, C] input perturbation added to noise in the noisy latents only
    std::vector<float> timesteps;      // [B] t as the UNet takes it (f32)
    std::vector<float> sqrt_ac, sqrt_1m_ac;  // [B] noising coefficients
    std::vector<float> weights;        // [B] loss weights
    std::vector<float> huber_c;        // [B] (huber only; empty otherwise)
};

// What the noise variants need beyond the sizes: the latent sides (pyramid noise) and the latents
// themselves [B, h, w, C] (adaptive noise offset). Unused (and may stay empty) otherwise.
struct DrawInputs {
    int64_t latent_h = 0, latent_w = 0;
    std::span<const float> latents;
};

// Draws noise (then offset noise, pyramid noise), then timesteps (then the input perturbation),
// from rng. `latent_numel` is B * h * w * C. `s` is the SD1.5 schedule: its SNR gives the loss
// weights (kohya's all_snr); the noising coefficients come from its zero-terminal-SNR rescaling
// when o.zero_terminal_snr. With `timestep`, every sample is at that timestep and none is drawn
// (kohya's validation sets min_timestep = max_timestep = t, and get_timesteps then fills the
// batch without drawing); everything else is drawn as always.
MicroBatch draw_micro_batch(const Objective& o, const diffusion::DdpmSchedule& s, int64_t batch, int64_t latent_numel,
                            int64_t channels, diffusion::NoiseRng& rng, const DrawInputs& in = {},
                            std::optional<int32_t> timestep = std::nullopt);

// Whether o's noise needs the host: the variants the step graph does not draw (pyramid noise,
// adaptive or random-strength offset noise, input perturbation). The graph then takes the noise as
// an input (StepOptions::host_noise) and the step costs the host draw and its upload.
bool draws_noise_on_host(const Objective& o);

// A micro-batch's draws as the step graph takes them: where its noise starts in the stream (the
// graph draws the noise and the offset noise from there) and the timesteps after them; with
// draws_noise_on_host, the noise itself (and the input perturbation) drawn on the host instead.
struct StepDraw {
    uint64_t seed = 0, counter = 0;
    double noise_offset = 0.0;
    std::vector<int32_t> t;
    std::vector<float> noise, ip_noise;  // [B, h, w, C]: host-drawn noise only (else empty)
};
// Moves rng exactly as draw_micro_batch does, drawing on the host only the timesteps (or, with
// draws_noise_on_host, everything draw_micro_batch draws).
StepDraw draw_step(const Objective& o, const diffusion::DdpmSchedule& s, int64_t batch, int64_t latent_numel,
                   int64_t channels, diffusion::NoiseRng& rng, const DrawInputs& in = {},
                   std::optional<int32_t> timestep = std::nullopt);
// Data parallelism: a rank's part [begin, begin + count) of a global micro-batch of `global`
// samples (per_sample latent values each). rng moves as draw_step moves it for the whole global
// micro-batch, on every rank alike. The timesteps, and with draws_noise_on_host every host draw,
// are the global draw's slice: what one process draws for those images. The graph-drawn noise
// starts at the sample's place in the global draw; with offset noise each rank's block holds its
// noise and then its offset draws (begin x (per_sample + channels) normals in), disjoint from the
// other ranks' within the global block, so that variant is not one process's values (the same
// distribution). `latents`: this rank's (adaptive noise offset: the others' count as zeros).
StepDraw draw_step_shard(const Objective& o, const diffusion::DdpmSchedule& s, int64_t global, int64_t begin,
                         int64_t count, int64_t per_sample, int64_t channels, diffusion::NoiseRng& rng,
                         const DrawInputs& in = {});
// How far draw_micro_batch moves rng: two draws per normal value (noise, offset noise, input
// perturbation), one per timestep and per random strength, and a fixed block per pyramid level
// (train/noise_variants.h). Timestep sampling rejects a draw with a chance below 2^-50 (one more
// draw); with `rejections`, one is counted per timestep (an upper bound in practice).
uint64_t micro_batch_draws(const Objective& o, int64_t batch, int64_t latent_numel, int64_t channels,
                           bool rejections = false);
// The part of those the noise and offset noise take (the step graph's, before the timesteps).
uint64_t noise_draws(const Objective& o, int64_t batch, int64_t latent_numel, int64_t channels);

}  // namespace train
