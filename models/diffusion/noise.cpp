#include "models/diffusion/noise.h"

#include <cmath>
#include <limits>
#include <numbers>
#include <utility>

#include "ggml-lite/core/error.h"
#include "ggml-lite/ops/rng.h"

namespace diffusion {

uint64_t NoiseRng::next_u64() { return gl::rng_hash(seed, counter++); }

double NoiseRng::uniform() { return double(next_u64() >> 11) * (1.0 / 9007199254740992.0); }

double NoiseRng::normal() {
    // 1 - u lies in (0, 1], so the log is finite.
    const double u1 = 1.0 - uniform();
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

int64_t NoiseRng::uniform_int(int64_t lo, int64_t hi) {
    GL_CHECK(lo < hi, "NoiseRng::uniform_int: empty range [", lo, ", ", hi, ")");
    const uint64_t span = uint64_t(hi) - uint64_t(lo);
    // Reject the top partial block of 2^64 so every value is equally likely (no modulo bias).
    const uint64_t limit = std::numeric_limits<uint64_t>::max() - std::numeric_limits<uint64_t>::max() % span;
    uint64_t x;
    do x = next_u64();
    while (x >= limit);
    return lo + int64_t(x % span);
}

DdpmSchedule DdpmSchedule::scaled_linear(double beta_start, double beta_end, int num_steps) {
    GL_CHECK(num_steps >= 2, "DDPM schedule: num_steps ", num_steps, " must be >= 2");
    GL_CHECK(std::isfinite(beta_start) && std::isfinite(beta_end) && beta_start > 0 && beta_end < 1 &&
                 beta_start <= beta_end,
             "DDPM schedule: betas ", beta_start, "..", beta_end, " must satisfy 0 < start <= end < 1");
    DdpmSchedule s;
    s.num_steps = num_steps;
    const double a = std::sqrt(beta_start), b = std::sqrt(beta_end);
    const auto n = size_t(num_steps);
    s.betas.resize(n);
    s.alphas_cumprod.resize(n);
    s.sqrt_alphas_cumprod.resize(n);
    s.sqrt_one_minus_alphas_cumprod.resize(n);
    double prod = 1.0;
    for (size_t i = 0; i < n; ++i) {
        const double r = a + (b - a) * double(i) / double(n - 1);
        s.betas[i] = r * r;
        prod *= 1.0 - s.betas[i];
        // diffusers and kohya derive everything from alphas_cumprod held in f32; near t = 0 the
        // rounding of ac is magnified by 1 - ac (about 1e-4 relative at t = 0), so the table holds
        // the exact product rounded to f32 and derives the rest from that, as they do.
        const double ac = double(float(prod));
        s.alphas_cumprod[i] = ac;
        s.sqrt_alphas_cumprod[i] = std::sqrt(ac);
        s.sqrt_one_minus_alphas_cumprod[i] = std::sqrt(1.0 - ac);
    }
    return s;
}

DdpmSchedule DdpmSchedule::sd15() { return scaled_linear(0.00085, 0.012, 1000); }

void DdpmSchedule::check_t(int64_t t) const {
    GL_CHECK(t >= 0 && t < num_steps, "DDPM schedule: timestep ", t, " is outside [0, ", num_steps, ")");
}

double DdpmSchedule::snr(int t) const {
    check_t(t);
    return alphas_cumprod[size_t(t)] / (1.0 - alphas_cumprod[size_t(t)]);
}

namespace {
// Validates the shapes shared by add_noise / velocity; returns the elements per sample.
size_t per_sample(const DdpmSchedule& s, const char* what, std::span<const float> x0, std::span<const float> noise,
                  std::span<const int32_t> t, std::span<float> out) {
    GL_CHECK(!t.empty(), "DDPM ", what, ": no timesteps");
    GL_CHECK(x0.size() == noise.size() && x0.size() == out.size(), "DDPM ", what, ": sizes differ (x0 ", x0.size(),
             ", noise ", noise.size(), ", out ", out.size(), ")");
    GL_CHECK(x0.size() % t.size() == 0, "DDPM ", what, ": ", x0.size(), " elements do not split into ", t.size(),
             " samples");
    for (int32_t ti : t) s.check_t(ti);
    return x0.size() / t.size();
}

// out = ca * a + cb * b per sample with coefficients from the timestep; computed in double and
// rounded once, so aliasing out with a or b is safe (each element is read before it is written).
template <class Coef>
void combine(std::span<const float> a, std::span<const float> b, std::span<const int32_t> t, std::span<float> out,
             size_t n, Coef coef) {
    for (size_t s = 0; s < t.size(); ++s) {
        const auto [ca, cb] = coef(size_t(t[s]));
        for (size_t i = s * n; i < (s + 1) * n; ++i) out[i] = float(ca * double(a[i]) + cb * double(b[i]));
    }
}
}  // namespace

void DdpmSchedule::add_noise(std::span<const float> x0, std::span<const float> noise, std::span<const int32_t> t,
                             std::span<float> out) const {
    const size_t n = per_sample(*this, "add_noise", x0, noise, t, out);
    combine(x0, noise, t, out, n, [this](size_t ti) {
        return std::pair{sqrt_alphas_cumprod[ti], sqrt_one_minus_alphas_cumprod[ti]};
    });
}

void DdpmSchedule::velocity(std::span<const float> x0, std::span<const float> noise, std::span<const int32_t> t,
                            std::span<float> out) const {
    const size_t n = per_sample(*this, "velocity", x0, noise, t, out);
    combine(noise, x0, t, out, n, [this](size_t ti) {
        return std::pair{sqrt_alphas_cumprod[ti], -sqrt_one_minus_alphas_cumprod[ti]};
    });
}

void fill_normal(std::span<float> out, NoiseRng& rng) {
    for (float& v : out) v = float(rng.normal());
}

}  // namespace diffusion
