// kohya's network_dropout on the LoRA branch (elementwise dropout on down's output), driven by
// the dropout op's per-step seed input: one graph, a new mask per step, the same mask forward and
// backward, refused where it cannot be switched off.
#include <doctest/doctest.h>

#include <cmath>
#include <random>

#include "ggml-lite/core/autodiff.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/ops/builder.h"
#include "lora/lora.h"
#include "models/sd15/clip.h"

using namespace gl;

namespace {

std::vector<float> uniform(size_t n, float s, std::mt19937& rng) {
    std::uniform_real_distribution<float> u(-s, s);
    std::vector<float> v(n);
    for (float& e : v) e = u(rng);
    return v;
}

// The tiny text encoder with a LoRA (network dropout p) and loss = sum(h * r).
struct DropNet {
    Graph g;
    nn::Weights w{g, DType::f32};
    lora::LoraNetwork net;
    ValueId ids, h, r, loss;
    Gradients grads;
    std::vector<ValueId> masks;  // every dropout node's output
    std::unique_ptr<Runtime> rt;

    explicit DropNet(float p) : net(lora::LoraConfig{4, 4.0f, 1.0f, 0, 0.0f, 0.0f, 0.0f, p}) {
        net.attach_text_encoder(w);
        ids = g.input("ids", DType::i32, {2, 5});
        h = sd::build_clip(w, g, ids, sd::ClipConfig::tiny());
        r = g.input("r", DType::f32, g.shape(h));
        loss = sum(g, mul(g, h, r));
        g.mark_output(h);
        g.mark_output(loss);
        for (const Node& n : g.nodes)
            if (n.op == Op::dropout) masks.push_back(n.out[0]);
        for (ValueId m : masks) g.mark_output(m);
        grads = backward(g, loss);
        rt = make_cpu_runtime(make_plan(g));
        std::mt19937 rng(5);
        const std::vector<int32_t> tok = {0, 5, 17, 900, 3, 999, 2, 1, 4, 6};
        rt->write(ids, tok.data(), DType::i32);
        for (const nn::WeightEntry& e : w.entries())
            rt->write_f32(e.id, uniform(size_t(g.shape(e.id).numel()), 0.2f, rng));
        for (ValueId p : net.parameters()) rt->write_f32(p, uniform(size_t(g.shape(p).numel()), 0.3f, rng));
        rt->write_f32(r, uniform(size_t(g.shape(r).numel()), 1.0f, rng));
    }
    std::vector<float> run(uint64_t seed) {
        net.sample_dropout(*rt, seed);
        rt->run();
        return rt->read_f32(h);
    }
};

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
    double m = 0;
    for (size_t i = 0; i < a.size(); i++) m = std::max(m, double(std::fabs(a[i] - b[i])));
    return m;
}

}  // namespace

TEST_CASE("lora network dropout: a dropout node per module on down's output, new masks per step seed") {
    DropNet d(0.3f);
    REQUIRE(d.net.dropout_seed_input() != kNoValue);
    CHECK(d.masks.size() == d.net.modules().size());  // 12 modules of the tiny text encoder
    CHECK(d.masks.size() == 12);
    for (size_t k = 0; k < d.masks.size(); k++) CHECK(d.g.shape(d.masks[k]).last() == 4);  // [.., rank]

    const std::vector<float> a = d.run(1), b = d.run(2), a2 = d.run(1);
    CHECK(max_diff(a, a2) == 0.0);   // the seed alone decides the masks
    CHECK(max_diff(a, b) > 1e-3);    // another step, other masks
    // About p of every module's elements are dropped; the rest are scaled by 1 / (1 - p).
    d.run(11);
    size_t zeros = 0, n = 0;
    for (ValueId m : d.masks)
        for (float e : d.rt->read_f32(m)) zeros += e == 0.0f, n++;
    CHECK(double(zeros) / double(n) == doctest::Approx(0.3).epsilon(0.25));

    // Network without dropout: no seed input, no dropout node.
    DropNet plain(0.0f);
    CHECK(plain.net.dropout_seed_input() == kNoValue);
    CHECK(plain.masks.empty());
}

TEST_CASE("lora network dropout: gradients use the forward's mask (finite differences at a fixed seed)") {
    DropNet d(0.5f);
    d.run(42);
    const lora::Module& m = d.net.modules()[3];
    for (ValueId p : {m.param("lora_down.weight"), m.param("lora_up.weight")}) {
        const std::vector<float> analytic = d.rt->read_f32(d.grads[p]);
        std::vector<float> x = d.rt->read_f32(p);
        double worst = 0, scale = 1e-3;
        for (size_t i = 0; i < x.size(); i += 3) {
            const float e = 1e-2f, x0 = x[i];
            x[i] = x0 + e;
            d.rt->write_f32(p, x);
            d.run(42);
            const double lp = d.rt->read_f32(d.loss)[0];
            x[i] = x0 - e;
            d.rt->write_f32(p, x);
            d.run(42);
            const double lm = d.rt->read_f32(d.loss)[0];
            x[i] = x0;
            const double num = (lp - lm) / (2.0 * e);
            worst = std::max(worst, std::fabs(num - analytic[i]));
            scale = std::max(scale, std::fabs(num));
        }
        d.rt->write_f32(p, x);
        CHECK_MESSAGE(worst / scale < 2e-2, d.g.v(p).name, " relative error ", worst / scale);
    }
}

TEST_CASE("lora network dropout: evaluation (training = false) and out-of-range p are refused") {
    DropNet d(0.1f);
    CHECK_THROWS_WITH_AS(d.net.sample_dropout(*d.rt, 1, false), doctest::Contains("network dropout"), gl::Error);
    CHECK_THROWS_AS(lora::LoraNetwork(lora::LoraConfig{4, 1.0f, 1.0f, 0, 0.0f, 0.0f, 0.0f, -0.1f}), gl::Error);
}
