// The DDPM training objective's host-side parts, as SD1.5 was trained and as kohya / diffusers
// train LoRAs for it: the noise schedule (scaled-linear betas 0.00085..0.012 over 1000 steps),
// noising, the epsilon / v-prediction targets, SNR and min-SNR-gamma weights, offset noise and
// seeded timestep sampling. Everything here is cheap per-step host work (tables of 1000 values,
// per-sample scalars); the graph side takes the per-sample coefficients from here.
//
// Tensors passed here are batch-major f32 buffers: sample b owns elements
// [b * n / B, (b + 1) * n / B). Feature maps are NHWC (channels last), as everywhere in ggml-lite.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace sd {

enum class Prediction { epsilon, v_prediction };

// A seeded, counter-based generator (splitmix64 of (seed, counter), gl::rng_hash), so a run is
// reproducible on every platform and a resumed run can continue the stream from a saved counter.
struct NoiseRng {
    uint64_t seed = 0;
    uint64_t counter = 0;

    uint64_t next_u64();
    double uniform();                           // [0, 1), 53 bits
    double normal();                            // N(0, 1) by Box-Muller (uses two draws)
    int64_t uniform_int(int64_t lo, int64_t hi);  // [lo, hi), unbiased (rejection)
};

struct DdpmSchedule {
    int num_steps = 0;
    // alphas_cumprod is the exact product rounded to f32, as diffusers stores it (its own f32
    // cumprod differs from that by up to 9.5e-7 relative for SD1.5); the other tables are derived
    // from it in double, so SNRs and noise coefficients near t = 0 agree with diffusers / kohya.
    std::vector<double> betas, alphas_cumprod, sqrt_alphas_cumprod, sqrt_one_minus_alphas_cumprod;

    // betas = linspace(sqrt(beta_start), sqrt(beta_end), num_steps)^2 (diffusers' "scaled_linear").
    static DdpmSchedule scaled_linear(double beta_start, double beta_end, int num_steps);
    // SD1.5: scaled_linear(0.00085, 0.012, 1000).
    static DdpmSchedule sd15();

    // ac / (1 - ac): the signal-to-noise ratio of timestep t.
    double snr(int t) const;
    // Min-SNR-gamma loss weight of timestep t (Hang et al. 2023, arXiv:2303.09556), as kohya's
    // sd-scripts library/custom_train_functions.py apply_snr_weight computes it:
    // epsilon: min(snr, gamma) / snr; v-prediction: min(snr, gamma) / (snr + 1).
    double min_snr_weight(int t, double gamma, Prediction pred) const;

    // out = sqrt(ac[t_b]) x0 + sqrt(1 - ac[t_b]) noise, per sample b (diffusers' add_noise).
    // out may alias x0 or noise.
    void add_noise(std::span<const float> x0, std::span<const float> noise, std::span<const int32_t> t,
                   std::span<float> out) const;
    // The v-prediction target sqrt(ac) noise - sqrt(1 - ac) x0 (diffusers' get_velocity).
    void velocity(std::span<const float> x0, std::span<const float> noise, std::span<const int32_t> t,
                  std::span<float> out) const;

    // Throws gl::Error unless 0 <= t < num_steps.
    void check_t(int64_t t) const;
};

// The weight formula on its own, for a given SNR (kohya's formula; see min_snr_weight).
double min_snr_weight_from_snr(double snr, double gamma, Prediction pred);

// Fills `out` with independent N(0, 1) values.
void fill_normal(std::span<float> out, NoiseRng& rng);

// Offset noise (kohya's --noise_offset, after crosslabs' "diffusion with offset noise"):
// noise[b, h, w, c] += offset * z[b, c] with z ~ N(0, 1) drawn once per (sample, channel).
// `noise` is NHWC with `batch` samples and `channels` channels (the innermost dimension).
void apply_noise_offset(std::span<float> noise, int64_t batch, int64_t channels, double offset, NoiseRng& rng);

// `batch` timesteps uniform in [min_t, max_t) (kohya: torch.randint(min_timestep, max_timestep);
// defaults 0 and 1000). Throws gl::Error unless 0 <= min_t < max_t <= num_steps.
std::vector<int32_t> sample_timesteps(int64_t batch, int min_t, int max_t, int num_steps, NoiseRng& rng);

}  // namespace sd
