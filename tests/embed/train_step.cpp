// Uses ggml-lite as an installed package: defines a tiny model (linear + SiLU, MSE loss),
// differentiates it, plans it, and trains it with plain SGD on the host through the CPU
// runtime, then again with optim::Optimizer (AdamW update ops inside the graph). Exits non-zero
// unless the loss falls both times and misuse surfaces as gl::Error.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "ggml-lite/core/autodiff.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/core/graph.h"
#include "ggml-lite/core/planner.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/ops/builder.h"
#include "optim/optimizer.h"

namespace {

std::vector<float> uniform(size_t n, float lo, float hi, std::mt19937& rng) {
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> v(n);
    for (float& e : v) e = u(rng);
    return v;
}

// The model both trainings use: silu(x w^T + b) against target, MSE loss.
struct TinyModel {
    gl::Graph g;
    gl::ValueId x, target, w, b, loss;
    TinyModel(int64_t B, int64_t In, int64_t Out)
        : x(g.input("x", gl::DType::f32, {B, In})), target(g.input("target", gl::DType::f32, {B, Out})),
          w(g.param("w", gl::DType::f32, {Out, In})), b(g.param("b", gl::DType::f32, {Out})),
          loss(gl::mse_loss(g, gl::silu(g, gl::linear(g, x, w, b)), target)) {
        g.mark_output(loss);
    }
};

// The same model trained by optim::Optimizer, as found through the registry by kohya's name.
bool falls_with_optimizer(const std::vector<float>& xs, const std::vector<float>& ts, const std::vector<float>& ws,
                          int64_t B, int64_t In, int64_t Out) {
    TinyModel m(B, In, Out);
    gl::Graph& g = m.g;
    const gl::ValueId x = m.x, target = m.target, w = m.w, b = m.b, loss = m.loss;
    gl::Gradients grads = gl::backward(g, loss);
    optim::Optimizer opt(optim::parse_optimizer("torch.optim.AdamW", {"weight_decay=0"}));
    opt.add_group(g, "all", {w, b}, {grads[w], grads[b]}, 5e-2);
    opt.finish(g);
    std::unique_ptr<gl::Runtime> rt = gl::make_cpu_runtime(gl::make_plan(g));
    rt->write_f32(x, xs);
    rt->write_f32(target, ts);
    rt->write_f32(w, ws);
    rt->write_f32(b, std::vector<float>(size_t(Out), 0.0f));
    opt.init_state(*rt);
    float first = 0, last = 0;
    for (int step = 0; step < 20; step++) {
        opt.set_step(*rt, opt.next_step());
        rt->run();
        opt.after_step(*rt);
        last = rt->read_f32(loss)[0];
        if (step == 0) first = last;
    }
    std::printf("embed: loss %.6f -> %.6f after 20 %s steps\n", first, last, opt.config().name());
    return std::isfinite(last) && last < 0.8f * first;
}

int run() {
    constexpr int64_t B = 16, In = 8, Out = 4;
    TinyModel m(B, In, Out);
    gl::Graph& g = m.g;
    const gl::ValueId x = m.x, target = m.target, w = m.w, b = m.b, loss = m.loss;

    gl::Gradients grads = gl::backward(g, loss);
    if (grads[w] == gl::kNoValue || grads[b] == gl::kNoValue) {
        std::fprintf(stderr, "embed: backward gave no gradient for a parameter\n");
        return 1;
    }
    std::unique_ptr<gl::Runtime> rt = gl::make_cpu_runtime(gl::make_plan(g));

    // Targets come from a fixed "teacher" layer, so a lower loss is reachable.
    std::mt19937 rng(42);
    std::vector<float> xs = uniform(size_t(B * In), -1.0f, 1.0f, rng);
    std::vector<float> teacher = uniform(size_t(Out * In), -1.0f, 1.0f, rng);
    std::vector<float> ts(size_t(B * Out));
    for (int64_t i = 0; i < B; i++)
        for (int64_t o = 0; o < Out; o++) {
            double z = 0;
            for (int64_t k = 0; k < In; k++) z += double(xs[size_t(i * In + k)]) * teacher[size_t(o * In + k)];
            ts[size_t(i * Out + o)] = float(z / (1.0 + std::exp(-z)));
        }
    std::vector<float> ws = uniform(size_t(Out * In), -0.1f, 0.1f, rng);
    const std::vector<float> ws_start = ws;
    std::vector<float> bs(size_t(Out), 0.0f);

    rt->write_f32(x, xs);
    rt->write_f32(target, ts);
    const float lr = 0.5f;
    float first = 0, last = 0;
    for (int step = 0; step < 20; step++) {
        rt->write_f32(w, ws);
        rt->write_f32(b, bs);
        rt->run();
        last = rt->read_f32(loss)[0];
        if (step == 0) first = last;
        std::vector<float> gw = rt->read_f32(grads[w]), gb = rt->read_f32(grads[b]);
        for (size_t i = 0; i < ws.size(); i++) ws[i] -= lr * gw[i];
        for (size_t i = 0; i < bs.size(); i++) bs[i] -= lr * gb[i];
    }
    std::printf("embed: %s runtime, loss %.6f -> %.6f after 20 SGD steps\n", rt->backend_name(), first, last);
    if (!(std::isfinite(last) && last < 0.8f * first)) {
        std::fprintf(stderr, "embed: the loss did not fall\n");
        return 1;
    }
    if (!falls_with_optimizer(xs, ts, ws_start, B, In, Out)) {
        std::fprintf(stderr, "embed: the loss did not fall with optim::Optimizer\n");
        return 1;
    }

    // A shape error must reach the caller as gl::Error, across the library boundary too.
    try {
        gl::linear(g, x, g.param("w_bad", gl::DType::f32, {Out, In + 1}));
        std::fprintf(stderr, "embed: a mismatched linear did not throw\n");
        return 1;
    } catch (const gl::Error& e) {
        std::printf("embed: bad call rejected: %s\n", e.what());
    }
    return 0;
}

}  // namespace

int main() {
    try {
        return run();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "embed: error: %s\n", e.what());
        return 1;
    }
}
