// kohya's noise and loss variants (train/noise_variants.h) against kohya's own functions
// (tests/golden/make_noise_variants_golden.py -> tests/golden/data/kohya/noise_variants.json):
// kohya's random draws are recorded there, fed to our deterministic pieces, and the outputs
// compared; our own draws are checked by their rules (sizes, counts, reproducibility).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "ddpm_golden.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/core/planner.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/ops/builder.h"
#include "test_util.h"
#include "train/noise_variants.h"

using diffusion::DdpmSchedule;
using diffusion::NoiseRng;
using nlohmann::json;

namespace {

json golden() {
    std::ifstream in(gltest::golden_dir("kohya") + "noise_variants.json");
    REQUIRE(in.good());
    return json::parse(in);
}

// A golden tensor: its NCHW shape and its values in NHWC order (ours).
struct Nhwc {
    int64_t n = 1, h = 1, w = 1, c = 1;
    std::vector<float> v;
};
Nhwc nhwc(const json& t) {
    const auto shape = t.at("shape").get<std::vector<int64_t>>();
    const auto data = t.at("data").get<std::vector<double>>();
    Nhwc r;
    REQUIRE((shape.size() == 4 || shape.size() == 3));
    r.n = shape[0];
    r.c = shape.size() == 4 ? shape[1] : 1;
    r.h = shape[shape.size() - 2];
    r.w = shape[shape.size() - 1];
    REQUIRE(data.size() == size_t(r.n * r.c * r.h * r.w));
    r.v.resize(data.size());
    for (int64_t b = 0; b < r.n; b++)
        for (int64_t c = 0; c < r.c; c++)
            for (int64_t y = 0; y < r.h; y++)
                for (int64_t x = 0; x < r.w; x++)
                    r.v[size_t(((b * r.h + y) * r.w + x) * r.c + c)] = float(data[size_t(((b * r.c + c) * r.h + y) * r.w + x)]);
    return r;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    REQUIRE(a.size() == b.size());
    double worst = 0;
    for (size_t i = 0; i < a.size(); i++) worst = std::max(worst, std::abs(double(a[i]) - double(b[i])));
    return worst;
}

// kohya's draws in call order, consumed one by one by the reconstruction.
struct Draws {
    const json& list;
    size_t next = 0;
    const json& take(const char* fn) {
        REQUIRE(next < list.size());
        const json& d = list[next++];
        REQUIRE(d.at("fn").get<std::string>() == fn);
        return d;
    }
    double scalar(const char* fn) { return take(fn).at("data")[0].get<double>(); }
};

// pyramid_noise_like's levels from its draws: random.random() (r), then torch.randn of the level.
std::vector<train::PyramidLevel> pyramid_levels(Draws& d, const Nhwc& noise, int iterations) {
    std::vector<train::PyramidLevel> levels;
    for (int i = 0; i < iterations; i++) {
        const double r = d.scalar("random") * 2 + 2;
        train::PyramidLevel l = train::pyramid_level_size(noise.h, noise.w, i, r);
        const Nhwc z = nhwc(d.take("randn"));
        CHECK(l.h == z.h);  // kohya's size rule: max(1, int(side / r^i))
        CHECK(l.w == z.w);
        l.z = z.v;
        const bool last = l.h == 1 || l.w == 1;
        levels.push_back(std::move(l));
        if (last) break;
    }
    return levels;
}

std::vector<double> offset_draws(Draws& d) {
    const json& z = d.take("randn");
    return z.at("data").get<std::vector<double>>();  // [B, C, 1, 1]: already b-major, c-minor
}

}  // namespace

TEST_CASE("noise variants: pyramid noise is kohya's pyramid_noise_like given its draws") {
    const json g = golden();
    double worst = 0;
    for (const json& c : g.at("pyramid")) {
        Nhwc noise = nhwc(c.at("noise"));
        Draws d{c.at("draws")};
        const auto levels = pyramid_levels(d, noise, c.at("iterations").get<int>());
        CHECK(d.next == d.list.size());  // kohya stopped where our rule stops
        train::apply_pyramid_noise(noise.v, noise.n, noise.h, noise.w, noise.c, c.at("discount").get<double>(), levels);
        const double e = max_abs_diff(noise.v, nhwc(c.at("out")).v);
        CHECK(e <= 2e-6);
        worst = std::max(worst, e);
    }
    MESSAGE("pyramid noise: worst abs. error ", worst);
}

TEST_CASE("noise variants: our pyramid draws follow kohya's rules in a fixed stream block") {
    for (const auto& [h, w, iterations] : {std::tuple{8, 8, 6}, {5, 7, 10}, {64, 48, 3}}) {
        NoiseRng rng{77, 5};
        const auto levels = train::draw_pyramid_levels(2, h, w, 4, iterations, rng);
        CHECK(rng.counter == 5 + train::pyramid_noise_draws(2 * h * w * 4, iterations));
        REQUIRE(!levels.empty());
        CHECK(levels[0].h == h);  // level 0 is full size whatever r
        CHECK(levels[0].w == w);
        for (size_t i = 0; i < levels.size(); i++) {
            CHECK(levels[i].z.size() == size_t(2 * levels[i].h * levels[i].w * 4));
            // r in [2, 4): each level is between side / 4^i and side / 2^i.
            CHECK(levels[i].h <= std::max<int64_t>(1, int64_t(h / std::pow(2.0, double(i)))));
            CHECK(levels[i].h >= std::max<int64_t>(1, int64_t(h / std::pow(4.0, double(i)))));
            const bool side_one = levels[i].h == 1 || levels[i].w == 1;
            CHECK((side_one ? i + 1 == levels.size() : true));  // stops after the first level of side 1
        }
        CHECK((levels.size() == size_t(iterations) || levels.back().h == 1 || levels.back().w == 1));
        NoiseRng again{77, 5};
        CHECK(train::draw_pyramid_levels(2, h, w, 4, iterations, again)[0].z == levels[0].z);
    }
    // The sum is normalised to unit (unbiased) standard deviation.
    NoiseRng rng{3, 0};
    std::vector<float> noise(2 * 8 * 8 * 4);
    diffusion::fill_normal(noise, rng);
    train::apply_pyramid_noise(noise, 2, 8, 8, 4, 0.3, train::draw_pyramid_levels(2, 8, 8, 4, 6, rng));
    double mean = 0, ss = 0;
    for (float v : noise) mean += v;
    mean /= double(noise.size());
    for (float v : noise) ss += (v - mean) * (v - mean);
    CHECK(std::sqrt(ss / double(noise.size() - 1)) == doctest::Approx(1.0).epsilon(1e-6));
    CHECK_THROWS_AS(train::pyramid_level_size(8, 8, 1, 4.0), gl::Error);
}

TEST_CASE("noise variants: offset noise with adaptive noise scale is kohya's apply_noise_offset") {
    const json g = golden();
    double worst = 0;
    for (const json& c : g.at("offset")) {
        const Nhwc latents = nhwc(c.at("latents"));
        Nhwc noise = nhwc(c.at("noise"));
        Draws d{c.at("draws")};
        const std::vector<double> z = offset_draws(d);
        std::optional<double> adaptive;
        if (!c.at("adaptive").is_null()) adaptive = c.at("adaptive").get<double>();
        const auto strength =
            train::noise_offset_strengths(latents.v, latents.n, latents.c, c.at("offset").get<double>(), adaptive);
        if (adaptive && *adaptive < 0) CHECK(*std::min_element(strength.begin(), strength.end()) >= 0.0);  // clamped
        train::add_noise_offset(noise.v, noise.n, noise.c, strength, z);
        const double e = max_abs_diff(noise.v, nhwc(c.at("out")).v);
        CHECK(e <= 1e-6);
        worst = std::max(worst, e);
    }
    MESSAGE("offset noise: worst abs. error ", worst);
}

TEST_CASE("noise variants: every noise option together is kohya's get_noise_noisy_latents_and_timesteps") {
    const json g = golden();
    const DdpmSchedule plain = DdpmSchedule::sd15();
    const DdpmSchedule fixed = train::zero_terminal_snr(plain);
    double worst_noise = 0, worst_noisy = 0, worst_v = 0;
    for (const json& c : g.at("noisy")) {
        const json& o = c.at("options");
        const Nhwc latents = nhwc(c.at("latents"));
        const int64_t B = latents.n, C = latents.c;
        Draws d{c.at("draws")};
        Nhwc noise = nhwc(d.take("randn_like"));
        double offset = o.at("noise_offset").get<double>();
        if (o.at("noise_offset_random_strength").get<bool>()) offset *= d.scalar("rand");
        std::optional<double> adaptive;
        if (!o.at("adaptive_noise_scale").is_null()) adaptive = o.at("adaptive_noise_scale").get<double>();
        const std::vector<double> z = offset_draws(d);
        train::add_noise_offset(noise.v, B, C, train::noise_offset_strengths(latents.v, B, C, offset, adaptive), z);
        if (!o.at("multires_noise_iterations").is_null()) {
            const auto levels = pyramid_levels(d, noise, o.at("multires_noise_iterations").get<int>());
            train::apply_pyramid_noise(noise.v, B, noise.h, noise.w, C, o.at("multires_noise_discount").get<double>(),
                                       levels);
        }
        const auto t = d.take("randint").at("data").get<std::vector<double>>();
        std::vector<int32_t> ts(t.begin(), t.end());
        CHECK(ts == c.at("timesteps").get<std::vector<int32_t>>());
        double gamma = o.at("ip_noise_gamma").get<double>();
        if (o.at("ip_noise_gamma_random_strength").get<bool>()) gamma *= d.scalar("rand");
        const Nhwc ip = nhwc(d.take("randn_like"));
        CHECK(d.next == d.list.size());
        // The target is the noise without the perturbation; the noisy latents carry it.
        worst_noise = std::max(worst_noise, max_abs_diff(noise.v, nhwc(c.at("noise")).v));
        std::vector<float> perturbed = noise.v;
        for (size_t i = 0; i < perturbed.size(); i++) perturbed[i] += float(gamma * ip.v[i]);
        const DdpmSchedule& s = c.at("zero_terminal_snr").get<bool>() ? fixed : plain;
        std::vector<float> noisy(perturbed.size()), velocity(perturbed.size());
        s.add_noise(latents.v, perturbed, ts, noisy);
        s.velocity(latents.v, noise.v, ts, velocity);
        worst_noisy = std::max(worst_noisy, max_abs_diff(noisy, nhwc(c.at("noisy")).v));
        worst_v = std::max(worst_v, max_abs_diff(velocity, nhwc(c.at("velocity")).v));
    }
    CHECK(worst_noise <= 2e-6);
    CHECK(worst_noisy <= 4e-6);
    CHECK(worst_v <= 4e-6);
    MESSAGE("noise, noisy latents, v target: worst abs. errors ", worst_noise, ", ", worst_noisy, ", ", worst_v);
}

TEST_CASE("noise variants: zero terminal SNR rescales the betas as kohya's fix, the weights keep all_snr") {
    const json g = golden().at("ztsnr");
    const DdpmSchedule plain = DdpmSchedule::sd15();
    const DdpmSchedule z = train::zero_terminal_snr(plain);
    const auto betas = g.at("betas").get<std::vector<double>>();
    const auto ac = g.at("alphas_cumprod").get<std::vector<double>>();
    const auto all_snr = g.at("all_snr").get<std::vector<double>>();
    REQUIRE(z.alphas_cumprod.size() == ac.size());
    CHECK(z.alphas_cumprod.back() == 0.0);
    CHECK(ac.back() == 0.0);
    CHECK(z.betas.back() == 1.0);
    CHECK(z.alphas_cumprod[0] == plain.alphas_cumprod[0]);
    double worst_ac = 0, worst_beta = 0, worst_snr = 0;
    for (size_t t = 0; t < ac.size(); t++) {
        // kohya's f32 cumprod lies up to 9.5e-7 relative from the exact one (SnrGolden), and its f32
        // arithmetic subtracts sqrt(alpha_bar_T) (0.068) from values near it: a few f32 ulps of
        // 0.07 in sqrt(alpha_bar), i.e. 2 sqrt(ac) * 3e-8 in ac.
        const double tol = 2 * std::sqrt(ac[t]) * 3e-8 + 1.5e-6 * ac[t];
        CHECK(std::abs(z.alphas_cumprod[t] - ac[t]) <= tol);
        worst_ac = std::max(worst_ac, std::abs(z.alphas_cumprod[t] - ac[t]));
        worst_beta = std::max(worst_beta, std::abs(z.betas[t] - betas[t]));
        worst_snr = std::max(worst_snr, std::abs(plain.snr(int(t)) - all_snr[t]) / all_snr[t]);
    }
    CHECK(worst_beta <= 1e-3);  // the last betas divide two tiny alpha_bars (f32 in kohya)
    CHECK(worst_snr <= 1.2e-3);  // kohya's all_snr is the plain schedule's (f32; see SnrGolden)
    MESSAGE("zero terminal SNR: worst abs. error alphas_cumprod ", worst_ac, ", betas ", worst_beta,
            "; all_snr vs the plain SNR rel. ", worst_snr);
}

TEST_CASE("noise variants: loss weights are kohya's post_process_loss (min-SNR, scale_v, v_pred_like, debiased)") {
    const json g = golden().at("weights");
    const DdpmSchedule s = DdpmSchedule::sd15();
    const gltest::SnrGolden snr(gltest::ddpm_golden());
    const auto ts = g.at("t").get<std::vector<int>>();
    double worst = 0;
    size_t cases = 0;
    for (const json& c : g.at("cases")) {
        train::Objective o;
        o.prediction = c.at("v_parameterization").get<bool>() ? diffusion::Prediction::v_prediction
                                                              : diffusion::Prediction::epsilon;
        o.min_snr_gamma = c.at("min_snr_gamma").is_null() ? 0.0 : c.at("min_snr_gamma").get<double>();
        o.scale_v_pred_loss_like_noise_pred = c.at("scale_v_pred_loss_like_noise_pred").get<bool>();
        o.v_pred_like_loss = c.at("v_pred_like_loss").is_null() ? 0.0 : c.at("v_pred_like_loss").get<double>();
        o.debiased_estimation = c.at("debiased_estimation_loss").get<bool>();
        o.zero_terminal_snr = c.at("zero_terminal_snr").get<bool>();
        const auto want = c.at("weights").get<std::vector<double>>();
        for (size_t i = 0; i < ts.size(); i++) {
            // Each factor moves with the SNR by a relative slope <= 1: four factors, four SNR tolerances.
            const double w = train::loss_weight(o, s, ts[i]);
            CHECK(std::abs(w - want[i]) <= (4 * snr.tolerance(s, ts[i]) + 1e-6) * want[i]);
            worst = std::max(worst, std::abs(w - want[i]) / want[i]);
        }
        cases++;
    }
    CHECK(cases == 32);
    MESSAGE("loss weights: ", cases, " option sets, worst rel. error ", worst);
}

TEST_CASE("noise variants: a micro-batch's draws with every variant (zero terminal SNR, input perturbation)") {
    const DdpmSchedule s = DdpmSchedule::sd15();
    train::Objective o;
    o.prediction = diffusion::Prediction::v_prediction;
    o.zero_terminal_snr = true;
    o.min_snr_gamma = 5;
    o.scale_v_pred_loss_like_noise_pred = true;
    o.noise_offset = 0.1;
    o.noise_offset_random_strength = true;
    o.adaptive_noise_scale = 0.2;
    o.multires_noise_iterations = 4;
    o.ip_noise_gamma = 0.1;
    o.ip_noise_gamma_random_strength = true;
    o.loss = gl::LossKind::smooth_l1;
    o.huber_schedule = train::HuberSchedule::snr;
    o.validate(s);
    const int64_t B = 3, h = 8, w = 8, C = 4, n = B * h * w * C;
    std::vector<float> latents(size_t(n), 0.5f);
    NoiseRng rng{11, 0};
    const train::MicroBatch m = train::draw_micro_batch(o, s, B, n, C, rng, {h, w, latents});
    CHECK(rng.counter <= train::micro_batch_draws(o, B, n, C, true));
    CHECK(rng.counter >= train::micro_batch_draws(o, B, n, C));
    REQUIRE(m.ip_noise.size() == size_t(n));
    CHECK(m.huber_c.size() == size_t(B));
    const DdpmSchedule z = train::zero_terminal_snr(s);
    for (size_t b = 0; b < size_t(B); b++) {
        const int t = m.t[b];
        CHECK(m.sqrt_ac[b] == float(z.sqrt_alphas_cumprod[size_t(t)]));  // noising on the rescaled schedule
        CHECK(m.weights[b] == float(train::loss_weight(o, s, t)));       // weights on the plain SNR
        CHECK(m.huber_c[b] == float(train::huber_c_at(o, z, t)));        // kohya's alphas_cumprod: the fixed one
    }
    NoiseRng again{11, 0};
    const train::MicroBatch m2 = train::draw_micro_batch(o, s, B, n, C, again, {h, w, latents});
    CHECK(m2.noise == m.noise);
    CHECK(m2.ip_noise == m.ip_noise);
    // The pyramid needs the sides, the adaptive offset the latents.
    NoiseRng r3{11, 0};
    CHECK(gltest::error_of([&] { train::draw_micro_batch(o, s, B, n, C, r3); }).find("adaptive noise scale") !=
          std::string::npos);
    // kohya's rules between options.
    train::Objective bad = o;
    bad.prediction = diffusion::Prediction::epsilon;
    CHECK_THROWS_AS(bad.validate(s), gl::Error);  // scale_v_pred_loss_like_noise_pred needs v
    bad = train::Objective{};
    bad.v_pred_like_loss = 0.2;
    bad.prediction = diffusion::Prediction::v_prediction;
    CHECK_THROWS_AS(bad.validate(s), gl::Error);
    bad = train::Objective{};
    bad.adaptive_noise_scale = 0.1;
    CHECK_THROWS_AS(bad.validate(s), gl::Error);  // adaptive needs noise_offset
}

TEST_CASE("noise variants: huber and smooth_l1 per-sample losses are kohya's conditional_loss") {
    const json g = golden();
    double worst = 0;
    for (const json& c : g.at("losses")) {
        const std::string kind = c.at("loss_type").get<std::string>();
        const gl::LossKind k = kind == "huber"       ? gl::LossKind::huber
                               : kind == "smooth_l1" ? gl::LossKind::smooth_l1
                               : kind == "l1"        ? gl::LossKind::l1
                                                     : gl::LossKind::l2;
        const Nhwc pred = nhwc(c.at("pred")), target = nhwc(c.at("target"));
        const auto hc = c.at("huber_c").get<std::vector<float>>();
        gl::Graph gr;
        const gl::Shape shape{pred.n, pred.h, pred.w, pred.c};
        const gl::ValueId p = gr.input("pred", gl::DType::f32, shape), t = gr.input("target", gl::DType::f32, shape);
        const gl::ValueId cv = gl::loss_takes_huber_c(k) ? gr.input("c", gl::DType::f32, {pred.n}) : gl::kNoValue;
        const gl::ValueId loss = gl::weighted_loss(gr, k, p, t, gl::kNoValue, cv);
        const gl::ValueId per = gl::weighted_loss_per_sample(gr, loss);
        gr.mark_output(per);
        auto rt = gl::make_cpu_runtime(gl::make_plan(gr));
        rt->write_f32(p, pred.v);
        rt->write_f32(t, target.v);
        if (cv != gl::kNoValue) rt->write_f32(cv, hc);
        rt->run();
        const auto want = c.at("per_sample").get<std::vector<double>>();
        const std::vector<float> got = rt->read_f32(per);
        for (size_t b = 0; b < want.size(); b++) {
            CHECK(std::abs(got[b] - want[b]) <= 1e-6 * std::max(1.0, std::abs(want[b])));
            worst = std::max(worst, std::abs(got[b] - want[b]));
        }
    }
    MESSAGE("conditional_loss: worst abs. error ", worst);
}

TEST_CASE("noise variants: the masked loss is kohya's apply_masked_loss (conditioning R channel, alpha)") {
    const json g = golden();
    double worst = 0;
    for (const json& c : g.at("masked")) {
        const Nhwc loss = nhwc(c.at("loss")), want = nhwc(c.at("out"));
        const Nhwc src = nhwc(c.at("mask"));
        // A conditioning image is in [-1, 1]: its R channel, to [0, 1]; an alpha mask is [0, 1] already.
        std::vector<float> mask(size_t(src.n * src.h * src.w));
        for (size_t i = 0; i < mask.size(); i++)
            mask[i] = c.at("source") == "conditioning_images" ? src.v[i * size_t(src.c)] / 2 + 0.5f : src.v[i];
        const int64_t f = src.h / loss.h;
        REQUIRE(src.w / loss.w == f);
        const std::vector<float> m = train::mask_to_latent(mask, src.n, src.h, src.w, f);
        // Through the loss op: per-sample mean of mask * |loss - 0| = kohya's masked loss mean.
        gl::Graph gr;
        const gl::Shape shape{loss.n, loss.h, loss.w, loss.c};
        const gl::ValueId p = gr.input("loss", gl::DType::f32, shape), t = gr.input("zero", gl::DType::f32, shape);
        const gl::ValueId mv = gr.input("mask", gl::DType::f32, {loss.n, loss.h, loss.w, 1});
        const gl::ValueId per = gl::weighted_loss_per_sample(gr, gl::weighted_loss(gr, gl::LossKind::l1, p, t,
                                                                                  gl::kNoValue, gl::kNoValue, mv));
        gr.mark_output(per);
        auto rt = gl::make_cpu_runtime(gl::make_plan(gr));
        rt->write_f32(p, loss.v);
        rt->write_f32(t, std::vector<float>(loss.v.size(), 0.0f));
        rt->write_f32(mv, m);
        rt->run();
        const std::vector<float> got = rt->read_f32(per);
        const size_t M = want.v.size() / size_t(want.n);
        for (size_t b = 0; b < size_t(want.n); b++) {
            double sum = 0;
            for (size_t i = b * M; i < (b + 1) * M; i++) sum += want.v[i];
            CHECK(std::abs(got[b] - sum / double(M)) <= 1e-6);
            worst = std::max(worst, std::abs(got[b] - sum / double(M)));
        }
        for (size_t i = 0; i < loss.v.size(); i++) {
            const double e = std::abs(double(loss.v[i]) * m[i / size_t(loss.c)] - want.v[i]);
            CHECK(e <= 1e-6);
            worst = std::max(worst, e);
        }
    }
    CHECK_THROWS_AS(train::mask_to_latent(std::vector<float>(12), 1, 3, 4, 8), gl::Error);
    MESSAGE("masked loss: worst abs. error ", worst);
}
