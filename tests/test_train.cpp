// The diffusion training step (train/): objective draws against scalar references, the graph's
// noising / targets / weighted loss against a plain UNet run and host arithmetic, a tiny LoRA
// that learns, fp32 vs bf16 vs fp16 (accumulation and NaN handling: test_train_accum.cpp).
#include <doctest/doctest.h>

#include <cmath>
#include <random>

#include "ggml-lite/core/error.h"
#include "models/sd15/sd_config.h"
#include "ggml-lite/core/planner.h"
#include "ggml-lite/io/safetensors.h"
#include "op_harness.h"
#include "train/trainer.h"
#include "train_fixtures.h"

using namespace gl;
using train::Precision;

namespace {

using namespace train_test;

train::StepOptions tiny_options(Precision p, int64_t batch = 2, float lr = 1e-3f) {
    train::StepOptions o = train_test::tiny_options(p, batch, 1, lr);
    o.optimizer.weight_decay = 0.0f;
    return o;
}

// A step graph on the CPU runtime with the tiny golden UNet's weights.
struct Tiny {
    std::unique_ptr<train::StepGraph> s;
    std::unique_ptr<Runtime> rt;
    explicit Tiny(const train::StepOptions& o, Recompute rc = Recompute::none, bool keep_pred = false) {
        s = train::build_step(o);
        if (keep_pred) s->g.mark_output(s->pred);
        PlanOptions po;
        po.recompute = rc;
        rt = make_cpu_runtime(make_plan(s->g, po));
        rt->poison(0xff);
        io::SafetensorsFile f(kTinyUnet);
        sd::load_unet(*s->unet_weights, sd::sd_config(*o.config).unet, f, *rt);
    }
    std::vector<float> params() const {
        std::vector<float> all;
        for (ValueId p : s->net->parameters())
            for (float e : rt->read_f32(p)) all.push_back(e);
        return all;
    }
};

std::vector<float> tiny_context(int64_t n, uint32_t seed) { return normal(size_t(n * kTokens * 16), seed); }

// Largest difference relative to the largest reference value (at least 1e-6).
double max_rel(const std::vector<float>& a, const std::vector<float>& b) { return gltest::rel_err(a, b, 1e-6); }

}  // namespace

TEST_CASE("train objective: Huber schedules, min-SNR weights and draws against scalar references") {
    const diffusion::DdpmSchedule s = diffusion::DdpmSchedule::sd15();
    train::Objective o;
    o.loss = LossKind::huber;
    o.huber_c = 0.2;
    o.huber_scale = 1.5;
    for (int t : {0, 1, 250, 999}) {
        o.huber_schedule = train::HuberSchedule::constant;
        CHECK(train::huber_c_at(o, s, t) == doctest::Approx(0.3));
        o.huber_schedule = train::HuberSchedule::exponential;
        CHECK(train::huber_c_at(o, s, t) == doctest::Approx(std::pow(0.2, t / 1000.0) * 1.5));
        o.huber_schedule = train::HuberSchedule::snr;
        const double sigma = std::sqrt(1.0 / s.snr(t));
        CHECK(train::huber_c_at(o, s, t) == doctest::Approx(0.8 / ((1 + sigma) * (1 + sigma)) + 0.2));
    }
    o.min_snr_gamma = 5.0;
    o.prediction = diffusion::Prediction::v_prediction;
    o.min_timestep = 100;
    o.max_timestep = 200;
    diffusion::NoiseRng rng{9, 0};
    const train::MicroBatch m = train::draw_micro_batch(o, s, 3, 3 * 2 * 2 * 4, 4, rng);
    REQUIRE(m.t.size() == 3);
    CHECK(m.noise.size() == 48);
    for (size_t b = 0; b < 3; b++) {
        CHECK(m.t[b] >= 100);
        CHECK(m.t[b] < 200);
        const double ac = s.alphas_cumprod[size_t(m.t[b])], snr = ac / (1 - ac);
        CHECK(m.sqrt_ac[b] == doctest::Approx(std::sqrt(ac)));
        CHECK(m.sqrt_1m_ac[b] == doctest::Approx(std::sqrt(1 - ac)));
        CHECK(m.weights[b] == doctest::Approx(std::min(snr, 5.0) / (snr + 1)));
        CHECK(m.huber_c[b] == doctest::Approx(train::huber_c_at(o, s, m.t[b])));
        CHECK(m.timesteps[b] == float(m.t[b]));
    }
    o.max_timestep = 1001;
    CHECK_THROWS_AS(o.validate(s), gl::Error);
    CHECK_THROWS_AS(train::parse_precision("fp8"), gl::Error);
    CHECK(train::parse_precision("bf16") == Precision::bf16);
}

TEST_CASE("train step: noising, epsilon and v targets and the weighted loss match a plain UNet and host arithmetic") {
    const std::vector<float> x0 = structured_latents(2, 1), ctx = tiny_context(2, 2);
    for (diffusion::Prediction pred : {diffusion::Prediction::epsilon, diffusion::Prediction::v_prediction})
        for (LossKind kind : {LossKind::l2, LossKind::l1, LossKind::huber}) {
            CAPTURE(int(pred));
            CAPTURE(loss_kind_name(kind));
            train::StepOptions o = tiny_options(Precision::fp32);
            o.prediction = pred;
            o.loss = kind;
            Tiny t(o, Recompute::none, /*keep_pred=*/true);
            train::TrainerOptions to;
            to.objective.prediction = pred;
            to.objective.loss = kind;
            to.objective.min_snr_gamma = 5.0;
            to.objective.max_timestep = 140;  // SNR > 5 up to t ~ 145: every min-SNR weight is < 1
            to.objective.noise_offset = 0.1;
            train::Trainer tr(*t.s, *t.rt, to);
            tr.init(3);
            // Non-zero up, so the LoRA takes part in the prediction.
            std::mt19937 rng(4);
            std::uniform_real_distribution<float> u(-0.1f, 0.1f);
            for (const lora::Module& m : t.s->net->modules()) {
                std::vector<float> up(size_t(m.layer().out * m.rank()));
                for (float& e : up) e = u(rng);
                t.rt->write_f32(m.param("lora_up.weight"), up);
            }
            const train::StepReport r = tr.evaluate(x0, ctx, 77);
            // evaluate() drew from NoiseRng{77}; the same draws here.
            diffusion::NoiseRng nr{77, 0};
            const train::MicroBatch mb =
                train::draw_micro_batch(to.objective, diffusion::DdpmSchedule::sd15(), 2, int64_t(x0.size()), 4, nr);
            const std::vector<float> p = t.rt->read_f32(t.s->pred);

            // The same UNet and LoRA on the host-noised latents.
            Graph g;
            nn::Weights w(g, DType::f32);
            lora::LoraNetwork net(o.lora);
            net.attach_unet(w);
            ValueId xi = g.input("x", DType::f32, {2, kSide, kSide, 4}), ti = g.input("t", DType::f32, {2});
            ValueId ci = g.input("c", DType::f32, {2, kTokens, 16});
            ValueId eps = sd::unet_forward(w, sd::sd_config(*o.config).unet, xi, ti, ci);
            g.mark_output(eps);
            auto rt2 = make_cpu_runtime(make_plan(g));
            io::SafetensorsFile f(kTinyUnet);
            sd::load_unet(w, sd::sd_config(*o.config).unet, f, *rt2);
            for (size_t k = 0; k < net.parameters().size(); k++)
                rt2->write_f32(net.parameters()[k], t.rt->read_f32(t.s->net->parameters()[k]));
            std::vector<float> noisy(x0.size()), target(x0.size());
            const size_t M = x0.size() / 2;
            for (size_t i = 0; i < x0.size(); i++) {
                const double a = mb.sqrt_ac[i / M], b = mb.sqrt_1m_ac[i / M];
                noisy[i] = float(a * x0[i] + b * mb.noise[i]);
                target[i] = pred == diffusion::Prediction::epsilon ? mb.noise[i] : float(a * mb.noise[i] - b * x0[i]);
            }
            rt2->write_f32(xi, noisy);
            rt2->write_f32(ti, mb.timesteps);
            rt2->write_f32(ci, ctx);
            rt2->run();
            CHECK(max_rel(p, rt2->read_f32(eps)) < 1e-5);

            // loss = mean_b w_b mean_i l(p - target)
            double total = 0;
            for (size_t b = 0; b < 2; b++) {
                double s = 0;
                for (size_t i = b * M; i < (b + 1) * M; i++) {
                    const double d = double(p[i]) - target[i], c = kind == LossKind::huber ? mb.huber_c[b] : 0.0;
                    s += kind == LossKind::l2 ? d * d : kind == LossKind::l1 ? std::fabs(d)
                                                                             : 2 * c * (std::sqrt(d * d + c * c) - c);
                }
                CHECK(r.per_sample[b] == doctest::Approx(s / double(M)).epsilon(1e-5));
                total += mb.weights[b] * s / double(M);
            }
            CHECK(r.loss == doctest::Approx(total / 2).epsilon(1e-5));
            CHECK(mb.weights[0] < 0.99f);  // min-SNR weights are in play
            CHECK(mb.weights[1] < 0.99f);
        }
}

TEST_CASE("train step: the graph draws the noise, offset noise and per-sample values of draw_micro_batch, bit for bit") {
    train::StepOptions o = tiny_options(Precision::fp32, 3);
    o.prediction = diffusion::Prediction::v_prediction;
    o.loss = LossKind::huber;
    auto s = train::build_step(o);
    for (ValueId v : {s->noise, s->timesteps, s->sqrt_ac, s->sqrt_1m_ac, s->loss_weights, s->huber_c})
        s->g.mark_output(v);
    auto rt = make_cpu_runtime(make_plan(s->g));
    rt->poison(0xff);
    io::SafetensorsFile f(kTinyUnet);
    sd::load_unet(*s->unet_weights, sd::sd_config(*o.config).unet, f, *rt);
    train::TrainerOptions to;
    to.seed = 31;
    to.objective.prediction = o.prediction;
    to.objective.loss = o.loss;
    to.objective.min_snr_gamma = 5.0;
    to.objective.noise_offset = 0.1;
    to.objective.min_timestep = 100;
    to.objective.max_timestep = 900;
    train::Trainer tr(*s, *rt, to);
    tr.init(2);
    const std::vector<float> x0 = structured_latents(3, 1), ctx = tiny_context(3, 2);
    const diffusion::DdpmSchedule sched = diffusion::DdpmSchedule::sd15();
    const auto same_as = [&](const train::MicroBatch& mb) {
        CHECK(rt->read_f32(s->noise) == mb.noise);
        CHECK(rt->read_f32(s->timesteps) == mb.timesteps);
        CHECK(rt->read_f32(s->sqrt_ac) == mb.sqrt_ac);
        CHECK(rt->read_f32(s->sqrt_1m_ac) == mb.sqrt_1m_ac);
        CHECK(rt->read_f32(s->loss_weights) == mb.weights);
        CHECK(rt->read_f32(s->huber_c) == mb.huber_c);
    };
    // A training step continues the trainer's stream: the micro-batch's draws, then the dropout seed.
    diffusion::NoiseRng host{31, 0};
    for (int k = 0; k < 2; k++) {
        tr.step(x0, ctx);
        const train::MicroBatch mb = train::draw_micro_batch(to.objective, sched, 3, int64_t(x0.size()), 4, host);
        host.next_u64();
        CHECK(tr.last_draw().t == mb.t);
        CHECK(tr.last_draw().counter + train::micro_batch_draws(to.objective, 3, int64_t(x0.size()), 4) == host.counter - 1);
        same_as(mb);
    }
    // evaluate() draws from the start of its seed's stream.
    tr.evaluate(x0, ctx, 77);
    diffusion::NoiseRng fixed{77, 0};
    same_as(train::draw_micro_batch(to.objective, sched, 3, int64_t(x0.size()), 4, fixed));
    // A draw the tables cannot serve is refused before it reaches the graph.
    CHECK_THROWS_WITH_AS(train::write_draw(*s, *rt, {1, 0, 0.0, {1, 2}}), doctest::Contains("for a batch of 3"), gl::Error);
    CHECK_THROWS_WITH_AS(train::write_draw(*s, *rt, {1, 0, 0.0, {1, 1000, 2}}), doctest::Contains("timestep 1000"),
                         gl::Error);
    CHECK_THROWS_WITH_AS(train::write_draw(*s, *rt, {1, 0, -0.5, {1, 2, 3}}), doctest::Contains("noise offset -0.5"),
                         gl::Error);
}

TEST_CASE("train: a tiny UNet LoRA learns a fixed latent set on the CPU (fixed-draw loss falls)") {
    const std::vector<float> data = structured_latents(4, 11), ctx = tiny_context(4, 12);
    Tiny t(tiny_options(Precision::fp32, 2, 4e-3f), Recompute::blocks);
    train::TrainerOptions to;
    to.seed = 5;
    train::Trainer tr(*t.s, *t.rt, to);
    tr.init(1);
    // The loss over fixed draws (both halves of the set, 4 seeds each): no sampling noise.
    auto fixed_loss = [&] {
        double sum = 0;
        for (int half = 0; half < 2; half++)
            for (uint64_t seed = 100; seed < 104; seed++)
                sum += tr.evaluate(std::span(data).subspan(size_t(half) * data.size() / 2, data.size() / 2),
                                   std::span(ctx).subspan(size_t(half) * ctx.size() / 2, ctx.size() / 2), seed)
                           .loss;
        return sum / 8;
    };
    const double before = fixed_loss();
    const std::vector<float> p0 = t.params();
    for (int step = 0; step < 80; step++) {
        const size_t half = size_t(step % 2);
        const train::StepReport r = tr.step(std::span(data).subspan(half * data.size() / 2, data.size() / 2),
                                            std::span(ctx).subspan(half * ctx.size() / 2, ctx.size() / 2));
        REQUIRE(r.applied);
        CHECK(std::isfinite(r.grad_norm));
    }
    const double after = fixed_loss();
    MESSAGE("tiny LoRA, 80 steps: fixed-draw loss ", before, " -> ", after);
    CHECK(tr.updates_applied() == 80);
    CHECK(after < 0.8 * before);
    CHECK(max_rel(t.params(), p0) > 1e-3);
}

TEST_CASE("train: fp32, bf16 and fp16 runs of the tiny model agree over 5 steps") {
    const std::vector<float> data = structured_latents(2, 21), ctx = tiny_context(2, 22);
    std::vector<std::vector<double>> losses;
    std::vector<std::vector<float>> params;
    for (Precision p : {Precision::fp32, Precision::bf16, Precision::fp16}) {
        Tiny t(tiny_options(p));
        train::TrainerOptions to;
        to.seed = 3;
        train::Trainer tr(*t.s, *t.rt, to);
        tr.init(2);
        std::vector<double> l;
        for (int k = 0; k < 5; k++) {
            const train::StepReport r = tr.step(data, ctx);
            CHECK(r.applied);
            l.push_back(r.loss);
        }
        if (p == Precision::fp16) CHECK(tr.loss_scaler().scale() == 65536.0);
        losses.push_back(l);
        params.push_back(t.params());
    }
    for (size_t m = 1; m < 3; m++) {
        double worst = 0;
        for (size_t k = 0; k < 5; k++) worst = std::max(worst, std::fabs(losses[m][k] - losses[0][k]) / losses[0][k]);
        const double pe = max_rel(params[m], params[0]);
        const std::string name = m == 1 ? "bf16" : "fp16";
        MESSAGE(name, " vs fp32 over 5 steps: loss rel. diff ", worst, ", LoRA params rel. diff ", pe);
        // bf16 rounds weights and activations to 8 bits of mantissa, fp16 to 11 (measured: loss 7.8e-4
        // and 1.5e-4). The parameters differ more: Adam's first steps move each element by about
        // lr * sign(g), so elements whose gradient is near 0 flip (measured 1.8e-2 and 8.9e-3 of
        // the largest element).
        CHECK(worst < (m == 1 ? 5e-3 : 2e-3));
        CHECK(pe < (m == 1 ? 8e-2 : 4e-2));
    }
}

TEST_CASE("train step: the full-size SD1.5 LoRA step (512x512, kohya targets, rank 16, bf16) builds and plans") {
    train::StepOptions o;  // SD1.5 UNet, 64x64 latents, batch 1, bf16, frozen text encoder
    o.lora = lora::LoraConfig{16, 16.0f, 1.0f};
    auto s = train::build_step(o);
    CHECK(s->net->modules().size() == 192);
    CHECK(s->g.dtype(s->context) == DType::bf16);
    CHECK(s->g.shape(s->context) == Shape{1, 77, 768});
    PlanOptions blocks, cheap;
    blocks.recompute = Recompute::blocks;
    cheap.recompute = Recompute::cheap;
    const Plan keep = make_plan(s->g), rec = make_plan(s->g, blocks), sel = make_plan(s->g, cheap);
    CHECK(check_overlaps(keep) == "");
    CHECK(check_overlaps(rec) == "");
    CHECK(check_overlaps(sel) == "");
    // One-pass ops recomputed: norms' and GEGLU's outputs (and the LoRA weights' casts) go, a
    // quarter of the activations at batch 1 (measured: 697.6 -> 521.1 MiB).
    CHECK(sel.peak_live_bytes < keep.peak_live_bytes * 4 / 5);
    CHECK(sel.peak_live_bytes > rec.peak_live_bytes);
    const double mib = 1024.0 * 1024.0;
    MESSAGE("SD1.5 LoRA step, batch 1: planned total ", keep.total_bytes() / mib, " MiB (activations ",
            keep.arena_bytes[int(Category::activations)] / mib, "), with recompute blocks ", rec.total_bytes() / mib,
            " MiB (activations ", rec.arena_bytes[int(Category::activations)] / mib, ")");
    CHECK(keep.arena_bytes[int(Category::frozen)] >= size_t(859520964) * 2);
    CHECK(rec.peak_live_bytes < keep.peak_live_bytes);
}

TEST_CASE("train step: a trained text encoder is in the graph and its LoRA learns at its own lr, network dropout") {
    train::StepOptions o = tiny_options(Precision::fp32);
    o.train_text_encoder = true;
    o.config = sd::sd_config(sd::sd_config(*o.config).unet, sd::ClipConfig{1000, 16, 2, 2, 32, 77, Act::quick_gelu, 1e-5f});  // width = the UNet's cross-attention
    o.text_encoder_lr = 5e-4f;
    o.lora.dropout = 0.1f;  // kohya's network_dropout, on both models' LoRAs
    auto s = train::build_step(o);
    REQUIRE(s->text_weights);
    CHECK(s->ids != kNoValue);
    CHECK(s->g.shape(s->context) == Shape{2, 77, 16});
    size_t te = 0;
    for (const lora::Module& m : s->net->modules()) te += m.layer().part == lora::Part::text_encoder;
    CHECK(te == 12);  // q, k, v, out_proj, fc1, fc2 of 2 layers
    REQUIRE(s->update->groups().size() == 2);
    CHECK(s->update->groups()[1].name == "text_encoder");
    CHECK(s->update->groups()[1].lr == 5e-4f);
    auto rt = make_cpu_runtime(make_plan(s->g));
    io::SafetensorsFile f(kTinyUnet);
    sd::load_unet(*s->unet_weights, sd::sd_config(*o.config).unet, f, *rt);
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-0.2f, 0.2f);
    for (const nn::WeightEntry& e : s->text_weights->entries()) {
        std::vector<float> v(size_t(s->g.shape(e.id).numel()));
        const bool gain = e.name.find("norm") != std::string::npos && e.name.ends_with(".weight");
        for (float& x : v) x = gain ? 1.0f : u(rng);
        rt->write_f32(e.id, v);
    }
    train::Trainer tr(*s, *rt, {});
    tr.init(9);
    std::vector<float> before;
    for (const lora::Module& m : s->net->modules())
        if (m.layer().part == lora::Part::text_encoder)
            for (float x : rt->read_f32(m.param("lora_up.weight"))) before.push_back(x);
    std::vector<int32_t> ids(size_t(s->ids_numel()));
    for (size_t i = 0; i < ids.size(); i++) ids[i] = int32_t((i * 37) % 1000);
    const std::vector<float> x0 = structured_latents(2, 4);
    for (int k = 0; k < 2; k++) CHECK(tr.step(x0, std::span<const int32_t>(ids)).applied);
    std::vector<float> after;
    for (const lora::Module& m : s->net->modules())
        if (m.layer().part == lora::Part::text_encoder)
            for (float x : rt->read_f32(m.param("lora_up.weight"))) after.push_back(x);
    CHECK(max_rel(after, before) > 0);  // up started at 0 and moved: gradients reached the text encoder
    // Frozen-context calls are refused for this graph; evaluation refuses network dropout.
    CHECK_THROWS_AS(tr.step(x0, std::span<const float>(tiny_context(2, 1))), gl::Error);
    CHECK_THROWS_WITH_AS(tr.evaluate(x0, std::span<const int32_t>(ids), 1), doctest::Contains("network dropout"),
                         gl::Error);
}

TEST_CASE("train step: Adafactor factors each LoRA weight as kohya's PyTorch module holds it") {
    // kohya's 1x1-conv LoRA weights are [r, in, 1, 1] / [out, r, 1, 1] (factored over 1 x 1: full
    // row and column state); linear ones [r, in] / [out, r] (factored over r x in).
    train::StepOptions o = tiny_options(Precision::fp32, 1, 1, 1e-3f);
    o.optimizer = optim::parse_optimizer("Adafactor", {});
    auto s = train::build_step(o);
    std::map<std::string, int64_t> sizes;
    for (ValueId v : s->update->optimizer().state_values()) sizes[s->g.v(v).name] = s->g.v(v).numel();
    int conv1x1 = 0, linear = 0;
    for (const lora::Module& m : s->net->modules()) {
        const std::string down = "optim." + s->g.v(m.param("lora_down.weight")).name, up = "optim." + s->g.v(m.param("lora_up.weight")).name;
        CAPTURE(m.key());
        if (m.layer().kind == lora::ModuleKind::conv1x1) {
            conv1x1++;
            CHECK(sizes.at(down + ".exp_avg_sq_row") == m.rank() * m.layer().in);
            CHECK(sizes.at(down + ".exp_avg_sq_col") == m.rank() * m.layer().in);
            CHECK(sizes.at(up + ".exp_avg_sq_row") == m.layer().out * m.rank());
        } else if (m.layer().kind == lora::ModuleKind::linear) {
            linear++;
            CHECK(sizes.at(down + ".exp_avg_sq_row") == m.rank());
            CHECK(sizes.at(down + ".exp_avg_sq_col") == m.layer().in);
            CHECK(sizes.at(up + ".exp_avg_sq_row") == m.layer().out);
        }
    }
    CHECK(conv1x1 > 0);
    CHECK(linear > 0);
}
