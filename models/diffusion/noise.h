// The DDPM noise schedule SD1.5 was trained with (scaled-linear betas 0.00085..0.012 over 1000
// steps): its tables, SNR, noising (add_noise) and the v-prediction target (velocity); the
// prediction types a model may be trained for; and the seeded noise generator. These are facts of
// the diffusion process that training and sampling share. The training objective built on them
// (loss weights, timestep ranges, offset noise, the per-step draws) is train/objective.h.
//
// Tensors passed here are batch-major f32 buffers: sample b owns elements
// [b * n / B, (b + 1) * n / B). Feature maps are NHWC (channels last), as everywhere in ggml-lite.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace diffusion {

// What the UNet is trained to predict: the noise (SD1.5) or v = sqrt(ac) noise - sqrt(1 - ac) x0.
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

// Fills `out` with independent N(0, 1) values.
void fill_normal(std::span<float> out, NoiseRng& rng);

}  // namespace diffusion
