// example-denoiser: trains a small conv + attention denoiser end to end with ggml-lite, to show the
// whole path: define -> differentiate -> plan (memory by category, recompute none vs blocks)
// -> run, with the loss falling. The data is generated: noisy colour waves in, clean waves out.
//
// Network (NHWC):  x -> conv3x3 -> depth times { [res: group_norm+silu -> conv3x3 -> + skip]
//                    -> tokens -> [attn: layer_norm -> q,k,v linear -> attention -> out linear -> + skip] }
//                    -> group_norm+silu -> conv3x3 -> + x  (predicts the clean image)
// Each bracketed block is a checkpoint segment, so recompute `blocks` keeps only what enters
// the blocks and rebuilds their insides during the backward pass.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "ggml-lite/core/autodiff.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/core/planner.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/ops/builder.h"
#include "tools/common/cli.h"

using namespace gl;

namespace {

struct Options {
    Backend backend = Backend::automatic;
    Recompute recompute = Recompute::blocks;
    int steps = 120, log_every = 20, batch = 8, size = 12, channels = 32, heads = 2, depth = 3;
    float lr = 3e-3f, noise = 0.5f;
    uint32_t seed = 1;  // std::mt19937's seed
};

Options parse(int argc, char** argv) {
    Options o;
    cli::Parser p("example-denoiser", "example-denoiser: trains a small conv + attention denoiser end to end and "
                                      "prints its memory plans (recompute none and blocks side by side) and the "
                                      "falling loss.");
    p.add_backend(o.backend, "where the example trains");
    p.add_parsed("--recompute", o.recompute, &parse_recompute, "none|blocks|cheap", "the recompute policy it trains with",
                 recompute_name(o.recompute));
    p.add_int("--steps", o.steps, 1, 1'000'000'000, "training steps");
    p.add_int("--log-every", o.log_every, 1, 1'000'000'000, "print the mean loss every N steps");
    p.add_int("--batch", o.batch, 1, 4096, "images per step");
    p.add_int("--size", o.size, 4, 1024, "image side in pixels");
    p.add_int("--channels", o.channels, 8, 4096, "feature channels, a multiple of 8 (group norm uses 8 groups)");
    p.add_int("--depth", o.depth, 1, 256, "res + attention blocks");
    p.add_real("--lr", o.lr, 0.0f, std::numeric_limits<float>::max(), "AdamW learning rate");
    p.add_int("--seed", o.seed, 0u, UINT32_MAX, "seed of the initialisation and the data");
    p.parse(argc, argv);
    if (o.channels % 8) throw cli::UsageError(cat("--channels must be a multiple of 8 (group norm uses 8 groups), got ",
                                                  o.channels));
    return o;
}

// ---- the model ----

struct ParamInit {
    ValueId id;
    enum Kind { fan_in, zeros, ones } kind;
    float gain;
};

struct Model {
    Graph g;
    ValueId x = kNoValue, target = kNoValue, loss = kNoValue;
    std::vector<ParamInit> params;
    Gradients grads;
    // Optimizer hyper-parameters, written each step: matrices decay, biases and gains do not.
    ValueId hyper_decay = kNoValue, hyper_plain = kNoValue;
    std::vector<ValueId> state;  // AdamW moments, zeroed before the first step

    ValueId param(const std::string& name, const Shape& s, ParamInit::Kind k, float gain = 1.0f) {
        ValueId p = g.param(name, DType::f32, s);
        params.push_back({p, k, gain});
        return p;
    }
    ValueId conv(const std::string& name, ValueId h, int64_t cin, int64_t cout, float gain = 1.0f) {
        Scope s(g, name);
        return conv2d(g, h, param("weight", {cout, 3, 3, cin}, ParamInit::fan_in, gain),
                      param("bias", {cout}, ParamInit::zeros), 1, 1);
    }
    ValueId gn_silu(const std::string& name, ValueId h, int64_t c) {
        Scope s(g, name);
        return group_norm(g, h, param("weight", {c}, ParamInit::ones), param("bias", {c}, ParamInit::zeros), 8, 1e-5f, true);
    }
    ValueId ln(const std::string& name, ValueId h, int64_t c) {
        Scope s(g, name);
        return layer_norm(g, h, param("weight", {c}, ParamInit::ones), param("bias", {c}, ParamInit::zeros), 1e-5f);
    }
    ValueId lin(const std::string& name, ValueId h, int64_t in, int64_t out) {
        Scope s(g, name);
        return linear(g, h, param("weight", {out, in}, ParamInit::fan_in), param("bias", {out}, ParamInit::zeros));
    }
};

void build(Model& m, const Options& o) {
    Graph& g = m.g;
    const int64_t N = o.batch, S = o.size, C = o.channels, H = o.heads, L = S * S;
    m.x = g.input("noisy", DType::f32, {N, S, S, 3});
    m.target = g.input("clean", DType::f32, {N, S, S, 3});

    ValueId h = m.conv("conv_in", m.x, 3, C);
    for (int b = 0; b < o.depth; b++) {
        const std::string res = "res" + std::to_string(b), attn = "attn" + std::to_string(b);
        {
            Segment seg(g, res);
            Scope sc(g, res);
            h = add(g, h, m.conv("conv", m.gn_silu("norm", h, C), C, C));
        }
        {
            Segment seg(g, attn);
            Scope sc(g, attn);
            ValueId tokens = reshape(g, h, {N, L, C});
            ValueId t = m.ln("norm", tokens, C);
            auto heads = [&](const char* name) { return reshape(g, m.lin(name, t, C, C), {N, L, H, C / H}); };
            ValueId a = attention(g, heads("to_q"), heads("to_k"), heads("to_v"));
            ValueId proj = m.lin("to_out", reshape(g, a, {N, L, C}), C, C);
            h = reshape(g, add(g, tokens, proj), {N, S, S, C});
        }
    }
    // Small output weights: the network starts close to "return the input".
    ValueId out = add(g, m.x, m.conv("conv_out", m.gn_silu("norm_out", h, C), C, 3, 0.1f));
    m.loss = mse_loss(g, out, m.target);
    g.mark_output(m.loss);
    m.grads = backward(g, m.loss);

    // The optimizer is part of the step's graph: one adamw_step node per parameter updates it
    // and its moments in place, on whichever backend runs the plan.
    m.hyper_decay = g.input("adamw.hyper", DType::f32, {kHyperSize});
    m.hyper_plain = g.input("adamw.hyper_no_decay", DType::f32, {kHyperSize});
    for (const ParamInit& p : m.params) {
        const Value& v = g.v(p.id);
        const Shape s = v.shape();
        const std::string name = v.name;
        ValueId mom1 = g.state(name + ".exp_avg", DType::f32, s), mom2 = g.state(name + ".exp_avg_sq", DType::f32, s);
        m.state.push_back(mom1);
        m.state.push_back(mom2);
        adamw_step(g, p.id, m.grads[p.id], mom1, mom2, s.nd > 1 ? m.hyper_decay : m.hyper_plain);
    }
}

// ---- data: a batch of colour waves with random frequency and phase, plus Gaussian noise ----

void make_batch(const Options& o, std::mt19937& rng, std::vector<float>& noisy, std::vector<float>& clean) {
    const int S = o.size;
    std::uniform_real_distribution<float> freq(0.5f, 2.0f), phase(0.0f, 6.2831853f), amp(0.3f, 1.0f);
    std::normal_distribution<float> noise(0.0f, o.noise);
    noisy.resize(size_t(o.batch) * S * S * 3);
    clean.resize(noisy.size());
    size_t i = 0;
    for (int n = 0; n < o.batch; n++) {
        float fx = freq(rng), fy = freq(rng), ph[3], a[3];
        for (int c = 0; c < 3; c++) ph[c] = phase(rng), a[c] = amp(rng);
        for (int y = 0; y < S; y++)
            for (int x = 0; x < S; x++)
                for (int c = 0; c < 3; c++, i++) {
                    clean[i] = a[c] * std::sin(6.2831853f * (fx * float(x) + fy * float(y)) / float(S) + ph[c]);
                    noisy[i] = clean[i] + noise(rng);
                }
    }
}

// ---- output ----

// Two reports in two columns, line by line.
void print_side_by_side(const std::string& left, const std::string& right) {
    auto lines = [](const std::string& s) {
        std::vector<std::string> out;
        std::istringstream is(s);
        for (std::string l; std::getline(is, l);) out.push_back(l);
        return out;
    };
    auto a = lines(left), b = lines(right);
    size_t width = 0;
    for (auto& l : a) width = std::max(width, l.size());
    for (size_t i = 0; i < std::max(a.size(), b.size()); i++)
        std::printf("%-*s   | %s\n", int(width), i < a.size() ? a[i].c_str() : "", i < b.size() ? b[i].c_str() : "");
}

int run(const Options& o) {
    std::string why;
    const Backend backend = resolve_backend(o.backend, &why);  // --backend cuda without CUDA: refused before any work
    Model m;
    build(m, o);
    std::printf("example-denoiser: conv + attention denoiser, %d res+attn blocks, batch %d, %dx%d pixels, %d channels, "
                "%d tokens; %zu nodes after backward\n\n",
                o.depth, o.batch, o.size, o.size, o.channels, o.size * o.size, m.g.nodes.size());

    const auto policy = [](Recompute r) {
        PlanOptions po;
        po.recompute = r;
        return po;
    };
    Plan none = make_plan(m.g, policy(Recompute::none));
    Plan blocks = make_plan(m.g, policy(Recompute::blocks));
    print_side_by_side(none.report(4), blocks.report(4));
    const double saved = double(none.arena_bytes[size_t(Category::activations)]) -
                         double(blocks.arena_bytes[size_t(Category::activations)]);
    std::printf("\nrecompute blocks: activations %.1f KiB %s (%.0f%%), for %d recomputed nodes (%.1f MFLOP per step)\n\n",
                std::fabs(saved) / 1024.0, saved >= 0 ? "smaller" : "LARGER",
                100.0 * std::fabs(saved) / double(std::max<size_t>(1, none.arena_bytes[size_t(Category::activations)])),
                blocks.recompute_nodes, blocks.recompute_flops / 1e6);

    if (!why.empty()) std::printf("backend: cpu (CUDA not used: %s)\n", why.c_str());
    // The rest of the example is backend-neutral.
    auto rt = make_runtime(o.recompute == Recompute::none     ? std::move(none)
                           : o.recompute == Recompute::blocks ? std::move(blocks)
                                                              : make_plan(m.g, policy(o.recompute)),
                           backend);
    std::printf("training on %s with recompute %s, AdamW in the graph (adamw_step), lr %g\n",
                rt->backend_name(), recompute_name(o.recompute), double(o.lr));

    // Parameter initialisation: fan-in scaled uniform for weights, zeros for biases, ones for gains.
    std::mt19937 rng(o.seed);
    // Parameters and optimizer state go to the backend once; the steps below only feed data.
    for (const ParamInit& p : m.params) {
        const Shape& s = m.g.shape(p.id);
        std::vector<float> d(size_t(s.numel()), p.kind == ParamInit::ones ? 1.0f : 0.0f);
        if (p.kind == ParamInit::fan_in) {
            const float bound = p.gain / std::sqrt(float(s.numel() / s[0]));
            std::uniform_real_distribution<float> u(-bound, bound);
            for (float& e : d) e = u(rng);
        }
        rt->write_f32(p.id, d);
    }
    for (ValueId st : m.state) rt->write_f32(st, std::vector<float>(size_t(m.g.v(st).numel()), 0.0f));

    std::vector<float> noisy, clean;
    double window = 0, first_mean = -1, last_mean = -1;
    int windows = 0;
    auto t0 = std::chrono::steady_clock::now();
    for (int step = 1; step <= o.steps; step++) {
        make_batch(o, rng, noisy, clean);
        rt->write_f32(m.x, noisy);
        rt->write_f32(m.target, clean);
        // lr, beta1, beta2, eps, weight decay, step, gradient scale
        rt->write_f32(m.hyper_decay, {o.lr, 0.9f, 0.999f, 1e-8f, 0.01f, float(step), 1.0f, 0.0f});
        rt->write_f32(m.hyper_plain, {o.lr, 0.9f, 0.999f, 1e-8f, 0.0f, float(step), 1.0f, 0.0f});
        rt->run();
        const float loss = rt->read_f32(m.loss)[0];
        if (!std::isfinite(loss)) fail("loss is ", loss, " at step ", step);
        window += loss;
        if (step % o.log_every == 0 || step == o.steps) {
            const int n = step % o.log_every ? step % o.log_every : o.log_every;
            const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            std::printf("step %4d/%d  loss %.5f (mean of last %d)  %.3f s/step\n", step, o.steps, window / n, n,
                        secs / step);
            if (first_mean < 0) first_mean = window / n;
            last_mean = window / n;
            window = 0;
            windows++;
        }
    }
    if (windows < 2) return 0;  // one window: nothing to compare
    const bool fell = last_mean < first_mean;
    std::printf("loss %.5f -> %.5f (%s); the noise variance, what returning the input scores, is %.4f\n",
                first_mean, last_mean, fell ? "falling" : "NOT falling", double(o.noise * o.noise));
    return fell ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    return cli::run_main("example-denoiser", [&] { return run(parse(argc, argv)); });
}
