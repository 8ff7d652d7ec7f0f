// The training step on CUDA: the tiny UNet LoRA trains with the CPU's loss curve (fp32 and bf16,
// with and without gradient accumulation), every step after the first replayed from the captured
// CUDA graph, so the per-step inputs (draws, hyper-parameters, skip probe, accumulation control)
// must be read from device memory; a NaN loss leaves the LoRA untouched on the device too.
#include <doctest/doctest.h>

#include <cmath>
#include <random>

#include "models/sd15/sd_config.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/core/planner.h"
#include "ggml-lite/io/safetensors.h"
#include "train/trainer.h"
#include "../train_fixtures.h"

using namespace gl;
using train_test::normal;
using train::Precision;

namespace {

using train_test::kTinyUnet;

train::StepOptions tiny_options(Precision p, int accum) { return train_test::tiny_options(p, 2, accum, 4e-3f); }

// One backend's run: `steps` optimizer steps on a fixed data set, the loss per step, the
// fixed-draw loss before and after, and the final LoRA.
struct Curve {
    std::vector<double> loss;
    double before = 0, after = 0;
    std::vector<float> lora;
};

Curve train_on(bool cuda, Precision p, int accum, int steps) {
    auto s = train::build_step(tiny_options(p, accum));
    Plan plan = make_plan(s->g, {Recompute::blocks});
    auto rt = cuda ? make_cuda_runtime(std::move(plan)) : make_cpu_runtime(std::move(plan));
    rt->poison(0xff);
    io::SafetensorsFile f(kTinyUnet);
    sd::load_unet(*s->unet_weights, sd::sd_config(*s->opt.config).unet, f, *rt);
    train::TrainerOptions to;
    to.seed = 17;
    train::Trainer tr(*s, *rt, to);
    tr.init(6);
    const int64_t n = s->latent_numel(), c = s->context_numel();
    const std::vector<float> data = normal(size_t(2 * n * accum), 1), ctx = normal(size_t(2 * c * accum), 2);
    auto fixed = [&] {
        double sum = 0;
        for (uint64_t seed = 50; seed < 54; seed++)
            sum += tr.evaluate(std::span(data).first(size_t(n)), std::span(ctx).first(size_t(c)), seed).loss;
        return sum / 4;
    };
    Curve cv;
    cv.before = fixed();
    for (int k = 0; k < steps; k++) {
        const size_t half = size_t(k % 2);
        const train::StepReport r = tr.step(std::span(data).subspan(half * size_t(n * accum), size_t(n * accum)),
                                            std::span(ctx).subspan(half * size_t(c * accum), size_t(c * accum)));
        REQUIRE(r.applied);
        cv.loss.push_back(r.loss);
    }
    cv.after = fixed();
    for (ValueId v : s->net->parameters())
        for (float e : rt->read_f32(v)) cv.lora.push_back(e);
    return cv;
}

}  // namespace

TEST_CASE("train on CUDA: the tiny LoRA follows the CPU's loss curve (fp32, bf16, accumulation)") {
    struct Mode {
        Precision p;
        int accum;
        double tol;  // per-step loss, relative
    };
    for (Mode m : {Mode{Precision::fp32, 1, 2e-3}, Mode{Precision::bf16, 1, 3e-2}, Mode{Precision::fp32, 2, 2e-3}}) {
        CAPTURE(train::precision_name(m.p));
        CAPTURE(m.accum);
        const Curve cpu = train_on(false, m.p, m.accum, 30), gpu = train_on(true, m.p, m.accum, 30);
        double worst = 0;
        for (size_t k = 0; k < cpu.loss.size(); k++) {
            REQUIRE(std::isfinite(gpu.loss[k]));
            worst = std::max(worst, std::fabs(gpu.loss[k] - cpu.loss[k]) / cpu.loss[k]);
        }
        const std::string name = train::precision_name(m.p);
        MESSAGE(name, " accum ", m.accum, ": fixed-draw loss CPU ", cpu.before, " -> ", cpu.after, ", CUDA ", gpu.before,
                " -> ", gpu.after, "; worst per-step loss rel. diff ", worst);
        CHECK(worst < m.tol);
        CHECK(gpu.after < 0.9 * gpu.before);
        CHECK(std::fabs(gpu.after - cpu.after) / cpu.after < 10 * m.tol);
    }
}

TEST_CASE("train on CUDA: a NaN loss stops with the step named and leaves the LoRA and optimizer state unchanged") {
    auto s = train::build_step(tiny_options(Precision::bf16, 1));
    auto rt = make_cuda_runtime(make_plan(s->g));
    rt->poison(0xff);
    io::SafetensorsFile f(kTinyUnet);
    sd::load_unet(*s->unet_weights, sd::sd_config(*s->opt.config).unet, f, *rt);
    train::Trainer tr(*s, *rt, {});
    tr.init(2);
    const std::vector<float> x0 = normal(size_t(s->latent_numel()), 3), ctx = normal(size_t(s->context_numel()), 4);
    for (int k = 0; k < 3; k++) CHECK(tr.step(x0, ctx).applied);  // eager, captured, replayed
    std::vector<ValueId> watch = s->net->parameters();
    for (ValueId v : s->update->optimizer().state_values()) watch.push_back(v);
    std::vector<std::vector<float>> before;
    for (ValueId v : watch) before.push_back(rt->read_f32(v));
    std::vector<float> bad = x0;
    bad[5] = NAN;
    CHECK_THROWS_WITH_AS(tr.step(bad, ctx), doctest::Contains("training step 4: the loss is"), gl::Error);
    for (size_t i = 0; i < watch.size(); i++) CHECK(rt->read_f32(watch[i]) == before[i]);
    CHECK(tr.step(x0, ctx).applied);
}
