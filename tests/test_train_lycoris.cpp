// The training step with LyCORIS's network types (lora/loha.cpp, lokr.cpp, locon.cpp with DoRA):
// each learns the fixed tiny latent set (fixed-draw loss falls, in fp32 and bf16, DoRA on an int8
// base too), gradients are
// bitwise the same with and without recompute, and LyCORIS's dropouts (rank_dropout over the
// update's output rows, module_dropout over the whole module) gate as LyCORIS's do.
#include <doctest/doctest.h>

#include <cmath>

#include "models/sd15/sd_config.h"
#include "ggml-lite/core/planner.h"
#include "ggml-lite/io/safetensors.h"
#include "lora/network_args.h"
#include "test_util.h"
#include "train/trainer.h"
#include "train_fixtures.h"

using namespace gl;
using train::Precision;

namespace {

using namespace train_test;

struct Tiny {
    std::unique_ptr<train::StepGraph> s;
    std::unique_ptr<Runtime> rt;
    Tiny(const train::StepOptions& o, Recompute rc) {
        s = train::build_step(o);
        PlanOptions po;
        po.recompute = rc;
        rt = make_cpu_runtime(make_plan(s->g, po));
        rt->poison(0xff);
        io::SafetensorsFile f(kTinyUnet);
        sd::load_unet(*s->unet_weights, sd::sd_config(*o.config).unet, f, *rt);
    }
};

train::StepOptions options(Precision p, float lr, std::vector<std::pair<std::string, std::string>> args) {
    train::StepOptions o = tiny_options(p, 2, 1, lr);
    o.optimizer.weight_decay = 0.0f;
    o.lora = lora::network_config({"lycoris.kohya", 4, 4.0, std::nullopt, std::move(args)});
    return o;
}

std::vector<float> context(int64_t n, uint32_t seed) { return normal(size_t(n * kTokens * 16), seed); }

}  // namespace

TEST_CASE("train lycoris: LoHa, LoKr and DoRA on the tiny UNet learn a fixed latent set (fixed-draw loss falls)") {
    const std::vector<float> data = structured_latents(4, 11), ctx = context(4, 12);
    struct Run {
        std::string name;
        Precision p;
        std::vector<std::pair<std::string, std::string>> args;
        gl::WeightFormat base = gl::WeightFormat::dense;
    };
    for (const Run& run : std::vector<Run>{{"LoHa", Precision::fp32, {{"algo", "loha"}}},
                                           {"LoHa Tucker", Precision::fp32, {{"algo", "loha"}, {"use_tucker", "True"}}},
                                           {"LoKr", Precision::fp32, {{"algo", "lokr"}, {"factor", "4"}}},
                                           {"LoRA DoRA", Precision::fp32, {{"algo", "lora"}, {"dora_wd", "True"}}},
                                           {"LoKr DoRA bf16", Precision::bf16, {{"algo", "lokr"}, {"dora_wd", "True"}}},
                                           {"LoHa bf16", Precision::bf16, {{"algo", "loha"}}},
                                           // DoRA rebuilds the weight from the base's int8 codes and row scales.
                                           {"LoRA DoRA, int8 base", Precision::bf16, {{"algo", "lora"}, {"dora_wd", "True"}},
                                            gl::WeightFormat::int8}}) {
        CAPTURE(run.name);
        train::StepOptions o = options(run.p, 4e-3f, run.args);
        o.base_format = run.base;
        Tiny t(o, Recompute::blocks);
        train::TrainerOptions to;
        to.seed = 5;
        train::Trainer tr(*t.s, *t.rt, to);
        tr.init(1);
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
        for (int step = 0; step < 80; step++) {
            const size_t half = size_t(step % 2);
            const train::StepReport r = tr.step(std::span(data).subspan(half * data.size() / 2, data.size() / 2),
                                                std::span(ctx).subspan(half * ctx.size() / 2, ctx.size() / 2));
            REQUIRE(r.applied);
            CHECK(std::isfinite(r.grad_norm));
        }
        const double after = fixed_loss();
        MESSAGE(run.name, " (", t.s->net->title(), ", ", t.s->net->modules().size(), " modules), 80 steps: fixed-draw loss ",
                before, " -> ", after);
        CHECK(after < 0.8 * before);
    }
}

TEST_CASE("train lycoris: two steps give the same bits with and without recompute (LoHa Tucker DoRA, LoKr)") {
    const std::vector<float> data = structured_latents(2, 4), ctx = context(2, 6);
    for (const auto& args : std::vector<std::vector<std::pair<std::string, std::string>>>{
             {{"algo", "loha"}, {"use_tucker", "True"}, {"dora_wd", "True"}}, {{"algo", "lokr"}, {"factor", "4"}}}) {
        std::vector<std::vector<float>> params;
        for (Recompute rc : {Recompute::none, Recompute::blocks}) {
            Tiny t(options(Precision::fp32, 1e-2f, args), rc);
            train::TrainerOptions to;
            to.seed = 5;
            train::Trainer tr(*t.s, *t.rt, to);
            tr.init(1);
            for (int step = 0; step < 2; step++) REQUIRE(tr.step(data, ctx).applied);
            std::vector<float> all;
            for (ValueId p : t.s->net->parameters())
                for (float e : t.rt->read_f32(p)) all.push_back(e);
            params.push_back(std::move(all));
        }
        CHECK(params[0] == params[1]);
    }
}

TEST_CASE("train lycoris: rank_dropout masks the update's output rows per step, module_dropout skips a module") {
    Tiny t(options(Precision::fp32, 1e-3f, {{"algo", "loha"}, {"rank_dropout", "0.5"}, {"module_dropout", "0.3"}}),
           Recompute::none);
    const lora::Module& m = t.s->net->modules()[0];
    REQUIRE(m.row_gate != kNoValue);
    REQUIRE(m.skip_gate != kNoValue);
    CHECK(m.gate == kNoValue);  // not kohya's per-sample rank gate
    CHECK(t.s->g.shape(m.row_gate) == Shape{m.layer().out});
    size_t rows = 0, kept = 0, modules = 0, skipped = 0;
    for (uint64_t seed = 1; seed <= 20; seed++) {
        t.s->net->sample_dropout(*t.rt, seed);
        for (const lora::Module& x : t.s->net->modules()) {
            for (float e : t.rt->read_f32(x.row_gate)) {
                CHECK((e == 0.0f || e == 1.0f));  // LyCORIS's kohya wrapper passes no rank_dropout_scale
                rows++;
                kept += e == 1.0f;
            }
            const float s = t.rt->read_f32(x.skip_gate)[0];
            CHECK((s == 0.0f || s == 1.0f));
            modules++;
            skipped += s == 0.0f;
        }
    }
    MESSAGE("rows kept ", double(kept) / double(rows), ", modules skipped ", double(skipped) / double(modules));
    CHECK(std::fabs(double(kept) / double(rows) - 0.5) < 0.05);
    CHECK(std::fabs(double(skipped) / double(modules) - 0.3) < 0.05);
    t.s->net->sample_dropout(*t.rt, 0, /*training=*/false);
    for (const lora::Module& x : t.s->net->modules()) {
        for (float e : t.rt->read_f32(x.row_gate)) CHECK(e == 1.0f);
        CHECK(t.rt->read_f32(x.skip_gate)[0] == 1.0f);
    }
}
