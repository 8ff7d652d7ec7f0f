#include "train/objective.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "ggml-lite/core/error.h"
#include "train/noise_variants.h"

namespace train {

const char* precision_name(Precision p) {
    switch (p) {
        case Precision::bf16: return "bf16";
        case Precision::fp16: return "fp16";
        case Precision::fp32: return "fp32";
    }
    return "?";
}

Precision parse_precision(const std::string& s) {
    if (s == "bf16") return Precision::bf16;
    if (s == "fp16") return Precision::fp16;
    if (s == "fp32" || s == "no") return Precision::fp32;
    gl::fail("precision '", s, "' is not one of bf16, fp16, fp32");
}

gl::DType activation_dtype(Precision p) {
    return p == Precision::bf16 ? gl::DType::bf16 : p == Precision::fp16 ? gl::DType::f16 : gl::DType::f32;
}

HuberSchedule parse_huber_schedule(const std::string& s) {
    if (s == "constant") return HuberSchedule::constant;
    if (s == "exponential") return HuberSchedule::exponential;
    if (s == "snr") return HuberSchedule::snr;
    gl::fail("huber schedule '", s, "' is not one of constant, exponential, snr");
}

void Objective::validate(const diffusion::DdpmSchedule& s) const {
    GL_CHECK(0 <= min_timestep && min_timestep < max_timestep && max_timestep <= s.num_steps, "objective: timesteps [",
             min_timestep, ", ", max_timestep, ") must lie in [0, ", s.num_steps, ") and be non-empty");
    GL_CHECK(std::isfinite(min_snr_gamma) && min_snr_gamma >= 0, "objective: min_snr_gamma ", min_snr_gamma,
             " must be >= 0 (0: off)");
    GL_CHECK(std::isfinite(noise_offset) && noise_offset >= 0, "objective: noise_offset ", noise_offset,
             " must be >= 0");
    GL_CHECK(!adaptive_noise_scale || (std::isfinite(*adaptive_noise_scale) && noise_offset > 0),
             "objective: adaptive_noise_scale needs a noise_offset (kohya: 'adaptive_noise_scale requires noise_offset')");
    GL_CHECK(multires_noise_iterations >= 0 && std::isfinite(multires_noise_discount),
             "objective: multires_noise_iterations ", multires_noise_iterations, " must be >= 0 and the discount finite");
    GL_CHECK(std::isfinite(ip_noise_gamma) && std::isfinite(v_pred_like_loss),
             "objective: ip_noise_gamma and v_pred_like_loss must be finite");
    GL_CHECK(!scale_v_pred_loss_like_noise_pred || prediction == diffusion::Prediction::v_prediction,
             "objective: scale_v_pred_loss_like_noise_pred needs v-prediction");
    GL_CHECK(v_pred_like_loss == 0 || prediction == diffusion::Prediction::epsilon,
             "objective: v_pred_like_loss cannot be used with v-prediction");
    if (gl::loss_takes_huber_c(loss)) {
        GL_CHECK(std::isfinite(huber_c) && huber_c > 0 && huber_c <= 1, "objective: huber_c ", huber_c,
                 " must be in (0, 1]");
        GL_CHECK(std::isfinite(huber_scale) && huber_scale > 0, "objective: huber_scale ", huber_scale,
                 " must be > 0");
    }
}

double huber_c_at(const Objective& o, const diffusion::DdpmSchedule& s, int t) {
    s.check_t(t);
    switch (o.huber_schedule) {
        case HuberSchedule::constant: return o.huber_c * o.huber_scale;
        case HuberSchedule::exponential: {
            const double alpha = -std::log(o.huber_c) / double(s.num_steps);
            return std::exp(-alpha * double(t)) * o.huber_scale;
        }
        case HuberSchedule::snr: {
            const double ac = s.alphas_cumprod[size_t(t)];
            const double sigma = std::sqrt((1.0 - ac) / ac);
            return (1.0 - o.huber_c) / ((1.0 + sigma) * (1.0 + sigma)) + o.huber_c;
        }
    }
    return o.huber_c;
}

double min_snr_weight_from_snr(double snr, double gamma, diffusion::Prediction pred) {
    GL_CHECK(std::isfinite(gamma) && gamma > 0, "min-SNR weight: gamma ", gamma, " must be > 0");
    GL_CHECK(snr > 0, "min-SNR weight: snr ", snr, " must be > 0");
    const double m = std::min(snr, gamma);
    // v-prediction's loss is (snr + 1) times epsilon's at the same timestep, hence the + 1.
    return pred == diffusion::Prediction::v_prediction ? m / (snr + 1.0) : m / snr;
}

double min_snr_weight(const diffusion::DdpmSchedule& s, int t, double gamma, diffusion::Prediction pred) {
    return min_snr_weight_from_snr(s.snr(t), gamma, pred);
}

double debiased_weight(const diffusion::DdpmSchedule& s, int t, diffusion::Prediction pred) {
    const double snr = std::min(s.snr(t), 1000.0);
    return pred == diffusion::Prediction::v_prediction ? 1.0 / (snr + 1.0) : 1.0 / std::sqrt(snr);
}

void apply_noise_offset(std::span<float> noise, int64_t batch, int64_t channels, double offset, diffusion::NoiseRng& rng) {
    GL_CHECK(batch > 0 && channels > 0, "noise offset: batch ", batch, " and channels ", channels, " must be > 0");
    GL_CHECK(std::isfinite(offset), "noise offset: offset ", offset, " is not finite");
    GL_CHECK(noise.size() % size_t(batch * channels) == 0, "noise offset: ", noise.size(),
             " elements are not ", batch, " samples of NHWC with ", channels, " channels");
    const size_t hw = noise.size() / size_t(batch * channels);
    std::vector<double> z(static_cast<size_t>(channels));
    for (int64_t b = 0; b < batch; ++b) {
        for (auto& v : z) v = offset * rng.normal();
        float* sample = noise.data() + size_t(b) * hw * size_t(channels);
        for (size_t p = 0; p < hw; ++p)
            for (size_t c = 0; c < size_t(channels); ++c) {
                float& v = sample[p * size_t(channels) + c];
                v = float(double(v) + z[c]);
            }
    }
}

std::vector<int32_t> sample_timesteps(int64_t batch, int min_t, int max_t, int num_steps, diffusion::NoiseRng& rng) {
    GL_CHECK(batch >= 0, "timestep sampling: batch ", batch, " is negative");
    GL_CHECK(0 <= min_t && min_t < max_t && max_t <= num_steps, "timestep sampling: range [", min_t, ", ", max_t,
             ") must satisfy 0 <= min < max <= ", num_steps);
    std::vector<int32_t> t(static_cast<size_t>(batch));
    for (auto& v : t) v = int32_t(rng.uniform_int(min_t, max_t));
    return t;
}

uint64_t noise_draws(const Objective& o, int64_t batch, int64_t latent_numel, int64_t channels) {
    const uint64_t offset =
        o.noise_offset > 0 ? 2 * uint64_t(batch) * uint64_t(channels) + (o.noise_offset_random_strength ? 1 : 0) : 0;
    return 2 * uint64_t(latent_numel) + offset + pyramid_noise_draws(latent_numel, o.multires_noise_iterations);
}

uint64_t micro_batch_draws(const Objective& o, int64_t batch, int64_t latent_numel, int64_t channels,
                           bool rejections) {
    const uint64_t ip = o.ip_noise_gamma != 0 ? 2 * uint64_t(latent_numel) + (o.ip_noise_gamma_random_strength ? 1 : 0)
                                              : 0;
    return noise_draws(o, batch, latent_numel, channels) + uint64_t(batch) * (rejections ? 2 : 1) + ip;
}

bool draws_noise_on_host(const Objective& o) {
    return o.multires_noise_iterations > 0 || o.ip_noise_gamma != 0 ||
           (o.noise_offset > 0 && (o.adaptive_noise_scale || o.noise_offset_random_strength));
}

diffusion::DdpmSchedule noising_schedule(const Objective& o, const diffusion::DdpmSchedule& s) {
    return o.zero_terminal_snr ? zero_terminal_snr(s) : s;
}

TimestepValues timestep_values(const Objective& o, const diffusion::DdpmSchedule& s,
                               const diffusion::DdpmSchedule& noising, int t) {
    s.check_t(t);
    noising.check_t(t);
    const size_t i = size_t(t);
    return {float(t), float(noising.sqrt_alphas_cumprod[i]), float(noising.sqrt_one_minus_alphas_cumprod[i]),
            float(loss_weight(o, s, t)), gl::loss_takes_huber_c(o.loss) ? float(huber_c_at(o, noising, t)) : 0.0f};
}

namespace {
void check_micro_batch(int64_t batch, int64_t latent_numel, int64_t channels) {
    GL_CHECK(batch > 0 && channels > 0 && latent_numel % (batch * channels) == 0, "draw_micro_batch: ",
             latent_numel, " latent elements do not split into ", batch, " samples of ", channels, " channels");
}

std::vector<int32_t> step_timesteps(const Objective& o, const diffusion::DdpmSchedule& s, int64_t batch,
                                    diffusion::NoiseRng& rng, std::optional<int32_t> timestep) {
    if (!timestep) return sample_timesteps(batch, o.min_timestep, o.max_timestep, s.num_steps, rng);
    GL_CHECK(*timestep >= 0 && *timestep < s.num_steps, "draw_micro_batch: timestep ", *timestep, " outside [0, ",
             s.num_steps, ")");
    return std::vector<int32_t>(size_t(batch), *timestep);
}
}  // namespace

MicroBatch draw_micro_batch(const Objective& o, const diffusion::DdpmSchedule& s, int64_t batch, int64_t latent_numel,
                            int64_t channels, diffusion::NoiseRng& rng, const DrawInputs& in,
                            std::optional<int32_t> timestep) {
    check_micro_batch(batch, latent_numel, channels);
    MicroBatch m;
    m.noise.resize(size_t(latent_numel));
    diffusion::fill_normal(m.noise, rng);
    if (o.noise_offset > 0) {
        const double offset = o.noise_offset * (o.noise_offset_random_strength ? rng.uniform() : 1.0);
        if (o.adaptive_noise_scale) {
            GL_CHECK(int64_t(in.latents.size()) == latent_numel, "draw_micro_batch: the adaptive noise scale needs the ",
                     latent_numel, " latent values, got ", in.latents.size());
            std::vector<double> z(size_t(batch * channels));
            for (double& v : z) v = rng.normal();
            add_noise_offset(m.noise, batch, channels,
                             noise_offset_strengths(in.latents, batch, channels, offset, o.adaptive_noise_scale), z);
        } else {
            apply_noise_offset(m.noise, batch, channels, offset, rng);
        }
    }
    if (o.multires_noise_iterations > 0) {
        GL_CHECK(in.latent_h > 0 && in.latent_w > 0 && in.latent_h * in.latent_w * batch * channels == latent_numel,
                 "draw_micro_batch: pyramid noise needs the latent sides (", in.latent_h, " x ", in.latent_w, ")");
        apply_pyramid_noise(m.noise, batch, in.latent_h, in.latent_w, channels, o.multires_noise_discount,
                            draw_pyramid_levels(batch, in.latent_h, in.latent_w, channels,
                                                o.multires_noise_iterations, rng));
    }
    m.t = step_timesteps(o, s, batch, rng, timestep);
    if (o.ip_noise_gamma != 0) {
        const double gamma = o.ip_noise_gamma * (o.ip_noise_gamma_random_strength ? rng.uniform() : 1.0);
        m.ip_noise = input_perturbation(latent_numel, gamma, rng);
    }
    // kohya prepares all_snr (the loss weights' SNR) before the zero-terminal-SNR fix; noising,
    // the v target and the Huber thresholds use the fixed alphas.
    const diffusion::DdpmSchedule noising = noising_schedule(o, s);
    for (int32_t t : m.t) {
        const TimestepValues v = timestep_values(o, s, noising, t);
        m.timesteps.push_back(v.timestep);
        m.sqrt_ac.push_back(v.sqrt_ac);
        m.sqrt_1m_ac.push_back(v.sqrt_1m_ac);
        m.weights.push_back(v.weight);
        if (gl::loss_takes_huber_c(o.loss)) m.huber_c.push_back(v.huber_c);
    }
    return m;
}

StepDraw draw_step(const Objective& o, const diffusion::DdpmSchedule& s, int64_t batch, int64_t latent_numel,
                   int64_t channels, diffusion::NoiseRng& rng, const DrawInputs& in, std::optional<int32_t> timestep) {
    check_micro_batch(batch, latent_numel, channels);
    StepDraw d;
    d.seed = rng.seed;
    d.counter = rng.counter;
    if (draws_noise_on_host(o)) {
        MicroBatch m = draw_micro_batch(o, s, batch, latent_numel, channels, rng, in, timestep);
        d.t = std::move(m.t);
        d.noise = std::move(m.noise);
        d.ip_noise = std::move(m.ip_noise);
        return d;
    }
    d.noise_offset = o.noise_offset;
    rng.counter += noise_draws(o, batch, latent_numel, channels);
    d.t = step_timesteps(o, s, batch, rng, timestep);
    return d;
}

StepDraw draw_step_shard(const Objective& o, const diffusion::DdpmSchedule& s, int64_t global, int64_t begin,
                         int64_t count, int64_t per_sample, int64_t channels, diffusion::NoiseRng& rng,
                         const DrawInputs& in) {
    GL_CHECK(global >= 1 && begin >= 0 && count >= 1 && begin + count <= global && per_sample >= 1, "draw_step_shard: ",
             count, " samples from ", begin, " of a global micro-batch of ", global);
    const size_t lo = size_t(begin * per_sample), n = size_t(count * per_sample);
    if (draws_noise_on_host(o)) {
        std::vector<float> all;  // the global latents, this rank's in place (adaptive noise offset only)
        DrawInputs gin{in.latent_h, in.latent_w, {}};
        if (!in.latents.empty()) {
            GL_CHECK(in.latents.size() == n, "draw_step_shard: ", in.latents.size(), " latent values for ", count,
                     " samples of ", per_sample);
            all.assign(size_t(global * per_sample), 0.0f);
            std::copy(in.latents.begin(), in.latents.end(), all.begin() + long(lo));
            gin.latents = all;
        }
        StepDraw d = draw_step(o, s, global, global * per_sample, channels, rng, gin);
        d.t = std::vector<int32_t>(d.t.begin() + begin, d.t.begin() + begin + count);
        d.noise = std::vector<float>(d.noise.begin() + long(lo), d.noise.begin() + long(lo + n));
        if (!d.ip_noise.empty())
            d.ip_noise = std::vector<float>(d.ip_noise.begin() + long(lo), d.ip_noise.begin() + long(lo + n));
        return d;
    }
    StepDraw d;
    d.seed = rng.seed;
    d.noise_offset = o.noise_offset;
    const uint64_t offset_draws = o.noise_offset > 0 ? uint64_t(channels) : 0;
    d.counter = rng.counter + 2 * uint64_t(begin) * (uint64_t(per_sample) + offset_draws);
    rng.counter += noise_draws(o, global, global * per_sample, channels);
    const std::vector<int32_t> t = step_timesteps(o, s, global, rng, std::nullopt);
    d.t.assign(t.begin() + begin, t.begin() + begin + count);
    return d;
}

}  // namespace train
