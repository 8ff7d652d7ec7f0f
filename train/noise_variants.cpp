#include "train/noise_variants.h"

#include <algorithm>
#include <cmath>

#include "ggml-lite/core/error.h"

namespace train {

namespace {
void check_nhwc(const char* what, size_t n, int64_t batch, int64_t h, int64_t w, int64_t channels) {
    GL_CHECK(batch > 0 && h > 0 && w > 0 && channels > 0 && n == size_t(batch * h * w * channels), what, ": ", n,
             " elements are not [", batch, ", ", h, ", ", w, ", ", channels, "]");
}
}  // namespace

PyramidLevel pyramid_level_size(int64_t h, int64_t w, int level, double r) {
    GL_CHECK(level >= 0 && r >= 2 && r < 4, "pyramid noise: level ", level, " with r = ", r,
             " (kohya draws r in [2, 4))");
    // Python's max(1, int(h / r**i)): a float quotient truncated toward zero.
    const double f = std::pow(r, double(level));
    PyramidLevel l;
    l.h = std::max<int64_t>(1, int64_t(double(h) / f));
    l.w = std::max<int64_t>(1, int64_t(double(w) / f));
    return l;
}

void add_bilinear_upsampled(std::span<const float> src, int64_t batch, int64_t h, int64_t w, int64_t channels,
                            std::span<float> dst, int64_t H, int64_t W, double weight) {
    check_nhwc("bilinear upsample (source)", src.size(), batch, h, w, channels);
    check_nhwc("bilinear upsample (target)", dst.size(), batch, H, W, channels);
    // align_corners=False: target pixel centres mapped back, clamped at 0; the right neighbour is
    // the pixel itself at the last column.
    struct Tap {
        int64_t i0, i1;
        double l1;
    };
    const auto taps = [](int64_t in, int64_t out) {
        std::vector<Tap> t(static_cast<size_t>(out));
        const double scale = double(in) / double(out);
        for (int64_t o = 0; o < out; o++) {
            const double x = std::max(0.0, scale * (double(o) + 0.5) - 0.5);
            const int64_t i0 = std::min(int64_t(x), in - 1);
            t[size_t(o)] = {i0, i0 + (i0 < in - 1 ? 1 : 0), x - double(i0)};
        }
        return t;
    };
    const std::vector<Tap> ty = taps(h, H), tx = taps(w, W);
    const size_t C = size_t(channels);
    for (int64_t b = 0; b < batch; b++) {
        const float* s = src.data() + size_t(b * h * w) * C;
        float* d = dst.data() + size_t(b * H * W) * C;
        for (int64_t y = 0; y < H; y++) {
            const Tap& a = ty[size_t(y)];
            for (int64_t x = 0; x < W; x++) {
                const Tap& c = tx[size_t(x)];
                const float* p00 = s + size_t(a.i0 * w + c.i0) * C;
                const float* p01 = s + size_t(a.i0 * w + c.i1) * C;
                const float* p10 = s + size_t(a.i1 * w + c.i0) * C;
                const float* p11 = s + size_t(a.i1 * w + c.i1) * C;
                float* q = d + size_t(y * W + x) * C;
                for (size_t k = 0; k < C; k++) {
                    const double top = (1 - c.l1) * p00[k] + c.l1 * p01[k];
                    const double bottom = (1 - c.l1) * p10[k] + c.l1 * p11[k];
                    q[k] = float(double(q[k]) + weight * ((1 - a.l1) * top + a.l1 * bottom));
                }
            }
        }
    }
}

void apply_pyramid_noise(std::span<float> noise, int64_t batch, int64_t h, int64_t w, int64_t channels,
                         double discount, const std::vector<PyramidLevel>& levels) {
    check_nhwc("pyramid noise", noise.size(), batch, h, w, channels);
    GL_CHECK(std::isfinite(discount), "pyramid noise: discount ", discount, " is not finite");
    for (size_t i = 0; i < levels.size(); i++)
        add_bilinear_upsampled(levels[i].z, batch, levels[i].h, levels[i].w, channels, noise, h, w,
                               std::pow(discount, double(i)));
    GL_CHECK(noise.size() >= 2, "pyramid noise: one element has no standard deviation");
    double mean = 0;
    for (float v : noise) mean += v;
    mean /= double(noise.size());
    double ss = 0;
    for (float v : noise) ss += (v - mean) * (v - mean);
    const double sd = std::sqrt(ss / double(noise.size() - 1));
    for (float& v : noise) v = float(double(v) / sd);
}

uint64_t pyramid_level_draws(int64_t latent_numel) { return 1 + 2 * uint64_t(latent_numel); }

uint64_t pyramid_noise_draws(int64_t latent_numel, int iterations) {
    return uint64_t(std::max(iterations, 0)) * pyramid_level_draws(latent_numel);
}

std::vector<PyramidLevel> draw_pyramid_levels(int64_t batch, int64_t h, int64_t w, int64_t channels, int iterations,
                                              diffusion::NoiseRng& rng) {
    GL_CHECK(iterations >= 0, "pyramid noise: iterations ", iterations, " must be >= 0");
    const int64_t numel = batch * h * w * channels;
    const uint64_t base = rng.counter;
    std::vector<PyramidLevel> levels;
    for (int i = 0; i < iterations; i++) {
        diffusion::NoiseRng level{rng.seed, base + uint64_t(i) * pyramid_level_draws(numel)};
        const double r = 2 + 2 * level.uniform();
        PyramidLevel l = pyramid_level_size(h, w, i, r);
        l.z.resize(size_t(batch * l.h * l.w * channels));
        diffusion::fill_normal(l.z, level);
        const bool last = l.h == 1 || l.w == 1;
        levels.push_back(std::move(l));
        if (last) break;
    }
    rng.counter = base + pyramid_noise_draws(numel, iterations);
    return levels;
}

std::vector<double> noise_offset_strengths(std::span<const float> latents, int64_t batch, int64_t channels,
                                           double offset, std::optional<double> adaptive_scale) {
    GL_CHECK(batch > 0 && channels > 0, "noise offset: batch ", batch, " and channels ", channels, " must be > 0");
    std::vector<double> s(size_t(batch * channels), offset);
    if (!adaptive_scale) return s;
    GL_CHECK(!latents.empty() && latents.size() % size_t(batch * channels) == 0, "adaptive noise scale: ",
             latents.size(), " latent values are not ", batch, " samples of NHWC with ", channels, " channels");
    const size_t hw = latents.size() / size_t(batch * channels), C = size_t(channels);
    for (size_t b = 0; b < size_t(batch); b++)
        for (size_t c = 0; c < C; c++) {
            double sum = 0;
            for (size_t p = 0; p < hw; p++) sum += latents[(b * hw + p) * C + c];
            // kohya clamps at 0 "in case of adaptive noise scale is negative".
            s[b * C + c] = std::max(0.0, offset + *adaptive_scale * std::abs(sum / double(hw)));
        }
    return s;
}

void add_noise_offset(std::span<float> noise, int64_t batch, int64_t channels, std::span<const double> strength,
                      std::span<const double> z) {
    const size_t n = size_t(batch * channels);
    GL_CHECK(batch > 0 && channels > 0 && strength.size() == n && z.size() == n && noise.size() % n == 0,
             "noise offset: ", noise.size(), " noise values, ", strength.size(), " strengths and ", z.size(),
             " draws do not fit ", batch, " samples of ", channels, " channels");
    const size_t hw = noise.size() / n, C = size_t(channels);
    for (size_t b = 0; b < size_t(batch); b++)
        for (size_t p = 0; p < hw; p++)
            for (size_t c = 0; c < C; c++) {
                float& v = noise[(b * hw + p) * C + c];
                v = float(double(v) + strength[b * C + c] * z[b * C + c]);
            }
}

std::vector<float> input_perturbation(int64_t latent_numel, double gamma, diffusion::NoiseRng& rng) {
    GL_CHECK(latent_numel > 0 && std::isfinite(gamma), "input perturbation: ", latent_numel, " values, gamma ", gamma);
    std::vector<float> z(static_cast<size_t>(latent_numel));
    for (float& v : z) v = float(gamma * rng.normal());
    return z;
}

diffusion::DdpmSchedule zero_terminal_snr(const diffusion::DdpmSchedule& s) {
    const size_t n = s.betas.size();
    GL_CHECK(n >= 2 && s.num_steps == int(n), "zero terminal SNR: the schedule has ", n, " betas");
    std::vector<double> root(n);  // sqrt(alpha_bar) of the betas
    double prod = 1;
    for (size_t i = 0; i < n; i++) {
        prod *= 1 - s.betas[i];
        root[i] = std::sqrt(prod);
    }
    const double first = root[0], last = root[n - 1];
    GL_CHECK(first > last, "zero terminal SNR: alpha_bar does not fall over the schedule");
    diffusion::DdpmSchedule z;
    z.num_steps = s.num_steps;
    z.betas.resize(n);
    double prev = 1;
    for (size_t i = 0; i < n; i++) {
        // The last r is 0 exactly: alpha_bar ends at 0 and the last beta is 1.
        const double r = (root[i] - last) * first / (first - last);
        const double bar = r * r;
        z.betas[i] = 1 - bar / prev;
        prev = bar;
    }
    prod = 1;
    for (size_t i = 0; i < n; i++) {
        prod *= 1 - z.betas[i];
        const double ac = double(float(prod));
        z.alphas_cumprod.push_back(ac);
        z.sqrt_alphas_cumprod.push_back(std::sqrt(ac));
        z.sqrt_one_minus_alphas_cumprod.push_back(std::sqrt(1 - ac));
    }
    return z;
}

double snr_scale(const diffusion::DdpmSchedule& s, int t) {
    const double snr = std::min(s.snr(t), 1000.0);
    return snr / (snr + 1);
}

double loss_weight(const Objective& o, const diffusion::DdpmSchedule& s, int t) {
    double w = o.min_snr_gamma > 0 ? min_snr_weight(s, t, o.min_snr_gamma, o.prediction) : 1.0;
    if (o.scale_v_pred_loss_like_noise_pred) w *= snr_scale(s, t);
    if (o.v_pred_like_loss != 0) w += w / snr_scale(s, t) * o.v_pred_like_loss;
    if (o.debiased_estimation) w *= debiased_weight(s, t, o.prediction);
    return w;
}

std::vector<float> mask_to_latent(std::span<const float> mask, int64_t batch, int64_t H, int64_t W, int64_t factor) {
    GL_CHECK(factor >= 1 && batch > 0 && H % factor == 0 && W % factor == 0 && mask.size() == size_t(batch * H * W),
             "masked loss: a mask of ", mask.size(), " values is not [", batch, ", ", H, ", ", W,
             "] with sides a multiple of ", factor);
    const int64_t h = H / factor, w = W / factor;
    std::vector<float> out(size_t(batch * h * w));
    for (int64_t b = 0; b < batch; b++)
        for (int64_t y = 0; y < h; y++)
            for (int64_t x = 0; x < w; x++) {
                double sum = 0;
                for (int64_t dy = 0; dy < factor; dy++)
                    for (int64_t dx = 0; dx < factor; dx++)
                        sum += mask[size_t((b * H + y * factor + dy) * W + x * factor + dx)];
                out[size_t((b * h + y) * w + x)] = float(sum / double(factor * factor));
            }
    return out;
}

}  // namespace train
