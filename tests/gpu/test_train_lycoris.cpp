// LyCORIS's network types on CUDA: the tiny UNet with LoHa (Tucker), LoKr and DoRA trains with
// the CPU's loss curve (fp32 and bf16), every step after the first replayed from the captured CUDA
// graph. Their graphs are made of existing ops (matmul with transposes, broadcast products,
// permutes, concat, layer_norm over weight rows, the DoRA ratio), so this is where the CUDA kernels
// meet those shapes.
#include <doctest/doctest.h>

#include <cmath>

#include "models/sd15/sd_config.h"
#include "ggml-lite/core/planner.h"
#include "ggml-lite/io/safetensors.h"
#include "lora/network_args.h"
#include "train/trainer.h"
#include "../train_fixtures.h"

using namespace gl;
using train::Precision;
using train_test::normal;

namespace {

struct Curve {
    std::vector<double> loss;
    double before = 0, after = 0;
};

Curve train_on(bool cuda, Precision p, const std::vector<std::pair<std::string, std::string>>& args, int steps) {
    train::StepOptions o = train_test::tiny_options(p, 2, 1, 4e-3f);
    o.lora = lora::network_config({"lycoris.kohya", 4, 4.0, std::nullopt, args});
    auto s = train::build_step(o);
    Plan plan = make_plan(s->g, {Recompute::blocks});
    auto rt = cuda ? make_cuda_runtime(std::move(plan)) : make_cpu_runtime(std::move(plan));
    rt->poison(0xff);
    io::SafetensorsFile f(train_test::kTinyUnet);
    sd::load_unet(*s->unet_weights, sd::sd_config(*s->opt.config).unet, f, *rt);
    train::TrainerOptions to;
    to.seed = 17;
    train::Trainer tr(*s, *rt, to);
    tr.init(6);  // after the base: DoRA's magnitudes start at its norms
    const int64_t n = s->latent_numel(), c = s->context_numel();
    const std::vector<float> data = normal(size_t(2 * n), 1), ctx = normal(size_t(2 * c), 2);
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
        const train::StepReport r =
            tr.step(std::span(data).subspan(half * size_t(n), size_t(n)), std::span(ctx).subspan(half * size_t(c), size_t(c)));
        REQUIRE(r.applied);
        cv.loss.push_back(r.loss);
    }
    cv.after = fixed();
    return cv;
}

}  // namespace

TEST_CASE("train on CUDA: LoHa, LoKr and DoRA follow the CPU's loss curve (fp32, bf16)") {
    struct Mode {
        std::string name;
        std::vector<std::pair<std::string, std::string>> args;
        Precision p;
        double tol;  // per-step loss, relative
    };
    for (const Mode& m : std::vector<Mode>{
             {"LoHa Tucker", {{"algo", "loha"}, {"use_tucker", "True"}}, Precision::fp32, 2e-3},
             {"LoKr", {{"algo", "lokr"}, {"factor", "4"}}, Precision::fp32, 2e-3},
             {"LoRA DoRA", {{"algo", "lora"}, {"dora_wd", "True"}}, Precision::fp32, 2e-3},
             {"LoHa DoRA (input axis)", {{"algo", "loha"}, {"dora_wd", "True"}, {"wd_on_output", "False"}}, Precision::bf16, 3e-2},
             {"LoKr DoRA", {{"algo", "lokr"}, {"dora_wd", "True"}}, Precision::bf16, 3e-2}}) {
        CAPTURE(m.name);
        const Curve cpu = train_on(false, m.p, m.args, 20), gpu = train_on(true, m.p, m.args, 20);
        double worst = 0;
        for (size_t k = 0; k < cpu.loss.size(); k++) {
            REQUIRE(std::isfinite(gpu.loss[k]));
            worst = std::max(worst, std::fabs(gpu.loss[k] - cpu.loss[k]) / cpu.loss[k]);
        }
        MESSAGE(m.name, ": fixed-draw loss CPU ", cpu.before, " -> ", cpu.after, ", CUDA ", gpu.before, " -> ", gpu.after,
                "; worst per-step loss rel. diff ", worst);
        CHECK(worst < m.tol);
        CHECK(gpu.after < gpu.before);
    }
}
