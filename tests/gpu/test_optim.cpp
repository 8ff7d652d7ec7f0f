// The optimizers through optim::Optimizer on CUDA against the CPU backend over many steps: every kind,
// two parameter groups (their own learning rates), clipping, a loss scale with an injected overflow
// (the skipped step must leave everything as it was on both backends), parameters of 1, 2 and 4
// dimensions and one large enough for 8-bit state and several reduction blocks, and one with a
// torch shape (Adafactor's 1 x 1 factoring). The op-list parity
// cases check one step of each op; this checks the state they carry from step to step.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/planner.h"
#include "ggml-lite/core/runtime.h"
#include "optim/optimizer.h"
#include "../op_harness.h"

using namespace gl;

namespace {

struct Problem {
    Graph g;
    std::vector<ValueId> params, grads;
    ValueId loss_scale = kNoValue;
    std::unique_ptr<optim::Optimizer> opt;
    std::unique_ptr<Runtime> rt;

    Problem(const char* kind, bool cuda) {
        // p4 is held as [12, 20, 1, 1] by PyTorch (a 1x1-conv LoRA weight): Adafactor factors it 1 x 1
        const Shape shapes[] = {Shape{64}, Shape{48, 40}, Shape{16, 3, 3, 24}, Shape{9000}, Shape{12, 20}};
        for (size_t i = 0; i < std::size(shapes); i++) {
            params.push_back(g.param(cat("p", i), DType::f32, shapes[i]));
            grads.push_back(g.input(cat("g", i), DType::f32, shapes[i]));
        }
        loss_scale = g.input("loss_scale", DType::f32, Shape{1});
        opt = std::make_unique<optim::Optimizer>(optim::parse_optimizer(kind, {"weight_decay=0.01"}));
        const bool prodigy = std::string(kind) == "Prodigy" || std::string(kind).starts_with("DAdapt");  // one d
        opt->add_group(g, "unet", {params[1], params[2], params[3], params[4]}, {grads[1], grads[2], grads[3], grads[4]},
                       1e-2, -1.0f, {Shape{}, Shape{}, Shape{}, Shape{12, 20, 1, 1}});
        opt->add_group(g, "te", {params[0]}, {grads[0]}, prodigy ? 1e-2 : 5e-3);
        opt->finish(g, loss_scale, 1.0f);
        Plan plan = make_plan(g);
        rt = cuda ? make_cuda_runtime(std::move(plan)) : make_cpu_runtime(std::move(plan));
        for (size_t i = 0; i < params.size(); i++) {
            std::vector<float> v(size_t(g.v(params[i]).numel()));
            for (size_t k = 0; k < v.size(); k++) v[k] = 0.3f * std::sin(0.07f * float(k) + float(i));
            rt->write_f32(params[i], v);
        }
        opt->init_state(*rt);
    }

    // One step: gradients pulled towards 0 plus a step-dependent wobble, times the loss scale.
    optim::StepResult step(optim::LossScaler& scaler, int k, bool overflow) {
        for (size_t i = 0; i < params.size(); i++) {
            std::vector<float> p = rt->read_f32(params[i]), gr(p.size());
            for (size_t j = 0; j < p.size(); j++)
                gr[j] = float((p[j] * 0.5f + 0.05f * std::sin(0.37f * float(j) + float(k))) * scaler.scale());
            if (overflow && i == 1) gr[7] = INFINITY;
            rt->write_f32(grads[i], gr);
        }
        scaler.write(*rt, loss_scale);
        opt->set_step(*rt, opt->next_step());
        rt->run();
        const optim::StepResult r = opt->after_step(*rt);
        scaler.update(r.nonfinite);
        return r;
    }

    std::vector<ValueId> watched() const {
        std::vector<ValueId> w = params;
        for (ValueId s : opt->state_values()) w.push_back(s);
        return w;
    }
};

}  // namespace

TEST_CASE("optimizers on CUDA follow the CPU over 30 steps (groups, clipping, loss scale, a skipped overflow)") {
    for (const char* kind : {"AdamW", "AdamW8bit", "Lion", "Adafactor", "Prodigy", "DAdaptSGD", "DAdaptAdaGrad",
                             "DAdaptAdan", "RAdamScheduleFree", "DAdaptation", "DAdaptAdanIP",
                             "SGDNesterov8bit", "AdEMAMix8bit"}) {
        CAPTURE(kind);
        Problem cpu(kind, false), gpu(kind, true);
        optim::LossScaler sc({256.0, 2.0, 0.5, 8}), sg({256.0, 2.0, 0.5, 8});
        int skipped = 0;
        for (int k = 0; k < 30; k++) {
            const bool overflow = k == 10;
            const optim::StepResult a = cpu.step(sc, k, overflow), b = gpu.step(sg, k, overflow);
            CHECK(a.skipped == overflow);
            CHECK(b.skipped == overflow);
            skipped += b.skipped;
            CHECK(sc.scale() == sg.scale());
        }
        CHECK(skipped == 1);
        double worst = 0;
        const std::vector<ValueId> wc = cpu.watched(), wg = gpu.watched();
        REQUIRE(wc.size() == wg.size());
        for (size_t i = 0; i < wc.size(); i++) {
            const std::vector<float> a = cpu.rt->read_f32(wc[i]), b = gpu.rt->read_f32(wg[i]);
            if (cpu.g.v(wc[i]).dtype == DType::u8) {  // 8-bit codes: identical (the kernels are bit-exact)
                int64_t differ = 0;
                for (size_t j = 0; j < a.size(); j++) differ += a[j] != b[j];
                CHECK_MESSAGE(differ == 0, cpu.g.describe(wc[i]), ": ", differ, " codes differ");
                continue;
            }
            worst = std::max(worst, gltest::rel_err(b, a, 1e-6));
        }
        MESSAGE(kind, ": worst relative difference of params and state after 30 steps ", worst);
        // f32 on both sides; reductions (norms, Adafactor's means, Prodigy's sums) add in other orders.
        CHECK(worst <= 1e-4);
    }
}
