// Gradient accumulation (2 micro-batches of 1 against one batch of 2), NaN/inf loss detection
// (the step is named, nothing is updated) and the fp16 overflow skip of the dynamic loss scale.
#include <doctest/doctest.h>

#include <cmath>
#include <random>

#include "models/sd15/sd_config.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/core/planner.h"
#include "ggml-lite/io/safetensors.h"
#include "train/trainer.h"
#include "op_harness.h"
#include "train_fixtures.h"

using namespace gl;
using train::Precision;

namespace {

using namespace train_test;
constexpr int64_t kLatent = kSide * kSide * 4, kCtx = kTokens * 16;

struct Tiny {
    std::unique_ptr<train::StepGraph> s;
    std::unique_ptr<Runtime> rt;
    Tiny(Precision p, int64_t batch, int accum) {
        s = train::build_step(tiny_options(p, batch, accum, 1e-3f));
        rt = make_cpu_runtime(make_plan(s->g));
        rt->poison(0xff);
        io::SafetensorsFile f(kTinyUnet);
        sd::load_unet(*s->unet_weights, sd::sd_config(*s->opt.config).unet, f, *rt);
    }
    std::vector<float> read_all(const std::vector<ValueId>& vs) const {
        std::vector<float> all;
        for (ValueId v : vs)
            for (float e : rt->read_f32(v)) all.push_back(e);
        return all;
    }
    std::vector<float> params() const { return read_all(s->net->parameters()); }
    std::vector<float> state() const { return read_all(s->update->optimizer().state_values()); }
};

std::vector<float> part(const std::vector<float>& v, size_t i, size_t n) {
    return {v.begin() + std::ptrdiff_t(i * n), v.begin() + std::ptrdiff_t((i + 1) * n)};
}

// Largest difference relative to the largest reference value (at least 1e-12).
double max_rel(const std::vector<float>& a, const std::vector<float>& b) { return gltest::rel_err(a, b, 1e-12); }

}  // namespace

TEST_CASE("train: 2 micro-batches of 1 give the update of one batch of 2 (accumulated gradients, 2 steps)") {
    Tiny one(Precision::fp32, 2, 1), acc(Precision::fp32, 1, 2);
    one.s->net->init(*one.rt, 8);
    acc.s->net->init(*acc.rt, 8);
    one.s->update->init_state(*one.rt);
    acc.s->update->init_state(*acc.rt);
    REQUIRE(acc.s->update->accumulators().size() == acc.s->net->parameters().size());
    train::Objective obj;
    obj.min_snr_gamma = 5.0;  // loss weights that differ between the two timesteps
    for (Tiny* m : {&one, &acc}) train::write_objective_tables(*m->s, *m->rt, obj, diffusion::DdpmSchedule::sd15());
    for (int step = 1; step <= 2; step++) {
        const std::vector<float> before = acc.params();
        // The same draws for both: two samples of latents, context, noise and timesteps. Sample k's
        // noise starts 2 kLatent draws into the batch's, where micro-batch k's is made to start.
        const std::vector<float> x0 = normal(2 * kLatent, 10 + step), ctx = normal(2 * kCtx, 30 + step);
        const std::vector<int32_t> t = {100 * step, 700 - 50 * step};
        const uint64_t seed = uint64_t(40 + step);
        auto write = [](Tiny& m, const std::vector<float>& x, const std::vector<float>& c, const train::StepDraw& d) {
            m.rt->write_f32(m.s->latents, x);
            m.rt->write_f32(m.s->context, c);
            train::write_draw(*m.s, *m.rt, d);
            m.rt->write_f32(m.s->loss_scale, {1.0f});
        };
        write(one, x0, ctx, {seed, 0, 0.0, t});
        one.s->update->prepare(*one.rt, 0);
        one.rt->run();
        const train::UpdateReport r1 = one.s->update->finish_run(*one.rt, true);
        train::UpdateReport r2;
        for (int k = 0; k < 2; k++) {
            const size_t i = size_t(k);
            write(acc, part(x0, i, kLatent), part(ctx, i, kCtx), {seed, 2 * i * kLatent, 0.0, {t[i]}});
            acc.s->update->prepare(*acc.rt, k);
            acc.rt->run();
            r2 = acc.s->update->finish_run(*acc.rt, k == 1);
            // The first micro-batch alone changes nothing.
            if (k == 0) CHECK(acc.params() == before);
        }
        if (step == 1) {
            // The accumulators hold the batch's gradients (the loss is a mean over the batch).
            std::vector<ValueId> grads;
            for (ValueId p : one.s->net->parameters()) grads.push_back(one.s->grads[p]);
            const double ge = max_rel(acc.read_all(acc.s->update->accumulators()), one.read_all(grads));
            MESSAGE("accumulated vs batch gradients: rel. diff ", ge);
            CHECK(ge < 1e-5);
        }
        CHECK(r1.applied);
        CHECK(r2.applied);
        CHECK(r2.grad_norm == doctest::Approx(r1.grad_norm).epsilon(1e-5));
        const double pe = max_rel(acc.params(), one.params());
        MESSAGE("step ", step, ": LoRA params rel. diff ", pe);
        CHECK(pe < 1e-5);
    }
}

TEST_CASE("train: a NaN or inf loss stops with an error naming the step, nothing is updated") {
    for (int accum : {1, 2}) {
        CAPTURE(accum);
        Tiny t(Precision::fp32, 2, accum);
        train::Trainer tr(*t.s, *t.rt, {});
        tr.init(4);
        const std::vector<float> ctx = normal(size_t(accum) * 2 * kCtx, 2);
        std::vector<float> x0 = normal(size_t(accum) * 2 * kLatent, 1);
        CHECK(tr.step(x0, ctx).applied);
        for (int bad_micro = 0; bad_micro < accum; bad_micro++)
            for (float bad : {NAN, INFINITY}) {
                std::vector<float> xb = x0;
                xb[size_t(bad_micro) * 2 * kLatent + 77] = bad;
                const std::vector<float> p = t.params(), st = t.state();
                CHECK_THROWS_WITH_AS(tr.step(xb, ctx), doctest::Contains("training step 2: the loss is"), gl::Error);
                CHECK(t.params() == p);
                // Optimizer state bitwise unchanged (the accumulators may hold the bad micro-batch: the
                // next step's first micro-batch resets them).
                CHECK(t.state() == st);
            }
        // Training goes on afterwards.
        const train::StepReport r = tr.step(x0, ctx);
        CHECK(r.applied);
        CHECK(r.step == 2);
        CHECK(std::isfinite(r.loss));
    }
}

TEST_CASE("train: fp16 dynamic loss scale skips an overflowing step, backs off, then trains") {
    Tiny t(Precision::fp16, 2, 1);
    train::TrainerOptions to;
    to.loss_scale.init_scale = 1e12;  // the scaled gradients overflow f16 (max 65504)
    to.loss_scale.growth_interval = 3;
    train::Trainer tr(*t.s, *t.rt, to);
    tr.init(5);
    const std::vector<float> x0 = normal(2 * kLatent, 3), ctx = normal(2 * kCtx, 4);
    const std::vector<float> p0 = t.params(), s0 = t.state();
    const train::StepReport r = tr.step(x0, ctx);
    CHECK_FALSE(r.applied);
    CHECK(std::isfinite(r.loss));
    CHECK(r.loss_scale == 1e12);
    CHECK(t.params() == p0);
    CHECK(t.state() == s0);
    CHECK(tr.loss_scaler().scale() == 5e11);
    int skipped = 1, applied = 0;
    for (int k = 0; k < 40 && applied < 4; k++) {
        const train::StepReport q = tr.step(x0, ctx);
        skipped += !q.applied;
        applied += q.applied;
    }
    MESSAGE("fp16: ", skipped, " overflowing steps skipped before the scale settled at ", tr.loss_scaler().scale());
    CHECK(applied == 4);
    CHECK(skipped >= 2);
    CHECK(tr.loss_scaler().scale() < 1e12);
    CHECK(tr.updates_applied() == 4);
    CHECK(t.params() != p0);
    // After growth_interval clean steps the scale doubles again.
    const double before = tr.loss_scaler().scale();
    for (int k = 0; k < 3; k++) tr.step(x0, ctx);
    CHECK(tr.loss_scaler().scale() >= before);
}
