// Whole-graph GPU tests: a small UNet-like training step (eager vs captured CUDA graph, and
// against the CPU reference), and 8-bit AdamW over 100 steps against the CPU reference.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include "ggml-lite/core/autodiff.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/core/planner.h"
#include "ggml-lite/core/recompute_budget.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/ops/builder.h"
#include "../op_harness.h"
#include "adam8bit_codes_all.h"
#include "image_arch.h"

using namespace gl;

namespace {

struct Net {
    Graph g;
    std::vector<std::pair<ValueId, std::vector<float>>> leaves;
    ValueId loss = kNoValue;
    std::vector<ValueId> grads;
};

std::vector<float> randn(std::mt19937& rng, int64_t n, float s) {
    std::normal_distribution<float> d(0.0f, s);
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& e : v) e = d(rng);
    return v;
}

// conv -> GN+SiLU -> conv (+res) -> down -> attention block -> up -> concat skip -> conv -> MSE,
// bf16 activations, f32 trainable masters cast to bf16.
Net build_unet_like(DType act) {
    Net n;
    Graph& g = n.g;
    std::mt19937 rng(42);
    const int64_t B = 2, H = 16, W = 16, C = 32, Cin = 4;
    auto leaf = [&](ValueId v, float s) { n.leaves.emplace_back(v, randn(rng, g.v(v).numel(), s)); return v; };
    auto p = [&](const std::string& name, const Shape& s, float sc) { return cast(g, leaf(g.param(name, DType::f32, s), sc), act); };
    auto w = [&](const std::string& name, const Shape& s, float sc) { return leaf(g.weight(name, act, s), sc); };
    ValueId x = leaf(g.input("x", act, {B, H, W, Cin}), 1.0f);
    ValueId target = leaf(g.input("target", act, {B, H, W, Cin}), 1.0f);
    ValueId h = conv2d(g, x, w("conv_in.w", {C, 3, 3, Cin}, 0.2f), w("conv_in.b", {C}, 0.1f), 1, 1);
    {
        Segment seg(g, "res");
        ValueId r = group_norm(g, h, w("gn.g", {C}, 1.0f), w("gn.b", {C}, 0.1f), 8, 1e-5f, true);
        r = conv2d(g, r, p("res.conv.w", {C, 3, 3, C}, 0.05f), p("res.conv.b", {C}, 0.05f), 1, 1);
        h = add(g, h, r);
    }
    ValueId skip = h;
    ValueId d = conv2d(g, h, w("down.w", {C, 3, 3, C}, 0.05f), kNoValue, 2, 1);  // [B, 8, 8, C]
    {
        Segment seg(g, "attn");
        ValueId t = reshape(g, d, {B, 64, C});
        ValueId ln = layer_norm(g, t, w("ln.g", {C}, 1.0f), w("ln.b", {C}, 0.1f), 1e-5f);
        ValueId q = reshape(g, linear(g, ln, p("q.w", {C, C}, 0.1f)), {B, 64, 4, 8});
        ValueId k = reshape(g, linear(g, ln, p("k.w", {C, C}, 0.1f)), {B, 64, 4, 8});
        ValueId v = reshape(g, linear(g, ln, p("v.w", {C, C}, 0.1f)), {B, 64, 4, 8});
        ValueId o = reshape(g, attention(g, q, k, v), {B, 64, C});
        o = linear(g, o, p("o.w", {C, C}, 0.1f), p("o.b", {C}, 0.05f));
        ValueId ff = geglu(g, linear(g, o, w("ff.w", {4 * C, C}, 0.1f)));
        o = add(g, o, linear(g, ff, p("ff2.w", {C, 2 * C}, 0.1f)));
        d = reshape(g, add(g, t, o), {B, 8, 8, C});
    }
    ValueId u = upsample2x(g, d);
    u = concat(g, {u, skip}, 3);
    ValueId out = conv2d(g, silu(g, u), w("out.w", {Cin, 3, 3, 2 * C}, 0.05f), w("out.b", {Cin}, 0.0f), 1, 1);
    n.loss = mse_loss(g, out, target);
    g.mark_output(n.loss);
    Gradients gr = backward(g, n.loss);
    for (auto& [v, d0] : n.leaves)
        if (g.v(v).role == Role::param) n.grads.push_back(gr[v]);
    return n;
}

std::vector<std::vector<float>> results(Runtime& rt, const Net& n) {
    std::vector<std::vector<float>> r{rt.read_f32(n.loss)};
    for (ValueId gv : n.grads) r.push_back(rt.read_f32(gv));
    return r;
}

// The runtime's count of programmatic edges, from its memory report's graph line.
size_t programmatic_edges(const Runtime& rt) {
    const std::string r = rt.memory_report(), key = " programmatic edges";
    const size_t at = r.find(key);
    REQUIRE_MESSAGE(at != std::string::npos, r);
    size_t b = r.rfind(' ', at - 1);
    return size_t(std::stoull(r.substr(b + 1, at - b - 1)));
}

// The runtime makes edges programmatic only for kernels loaded as sm_90 code or later.
bool sm90_device() { return gltest::loaded_image_arch() >= 90; }

bool pdl_off() {
    const char* e = std::getenv("GL_CUDA_PDL");
    return e && std::strcmp(e, "0") == 0;
}

}  // namespace

TEST_CASE("a UNet-like training step runs identically eagerly and from its captured CUDA graph") {
    Net n = build_unet_like(DType::bf16);
    for (Recompute policy : {Recompute::none, Recompute::blocks}) {
        CAPTURE(recompute_name(policy));
        PlanOptions opt;
        opt.recompute = policy;
        Plan plan = make_plan(n.g, opt);
        auto gpu = make_cuda_runtime(plan);
        gpu->poison(0xff);
        for (auto& [v, d] : n.leaves) gpu->write_f32(v, d);
        gpu->run();  // eager
        auto eager = results(*gpu, n);
        gpu->run();  // captured
        auto captured = results(*gpu, n);
        gpu->run();  // replayed
        auto replayed = results(*gpu, n);
        CHECK(std::isfinite(eager[0][0]));
        CHECK(eager == captured);
        CHECK(eager == replayed);
        // With sm_90 code loaded the graph's kernel-to-kernel edges are programmatic
        // (cuda/runtime.cu): the bitwise equalities above are run with them.
        const size_t edges = programmatic_edges(*gpu);
        MESSAGE("programmatic edges in the captured graph: ", edges);
        if (sm90_device() && !pdl_off()) CHECK(edges > 0);

        auto cpu = make_cpu_runtime(plan);
        for (auto& [v, d] : n.leaves) cpu->write_f32(v, d);
        cpu->run();
        auto ref = results(*cpu, n);
        for (size_t k = 0; k < ref.size(); k++)
            CHECK_MESSAGE(gltest::rel_err(eager[k], ref[k], 1e-6) <= 5e-2, "result ", k, " differs from the CPU reference");
    }
}

TEST_CASE("recompute budget on CUDA: the least plan gives none's results; a plan above the limit allocates nothing") {
    Net n = build_unet_like(DType::bf16);
    RecomputeSearch search(n.g, {});
    const Plan none = make_plan(n.g), least = search.plan(search.min_bytes());
    REQUIRE(least.recompute_nodes > 0);
    std::vector<std::vector<float>> out[2];
    for (int k = 0; k < 2; k++) {
        auto gpu = make_cuda_runtime(k == 0 ? none : least);
        gpu->poison(0xff);
        for (auto& [v, d] : n.leaves) gpu->write_f32(v, d);
        gpu->run();
        out[k] = results(*gpu, n);
    }
    CHECK(out[0] == out[1]);  // recompute repeats the same kernels on the same inputs

    const size_t need = none.total_bytes() + cuda_runtime_bytes(none.graph);
    CHECK(cuda_runtime_bytes(none.graph) ==
          (cuda_workspace_bytes(none.graph) + 255) / 256 * 256 + cuda_graph_bytes(none.graph) + kCudaAllocationPage);
    size_t free0 = 0, free1 = 0;
    cuda_memory_info(&free0, nullptr);
    CHECK_THROWS_WITH_AS(make_cuda_runtime(none, RuntimeOptions{need - 1}), doctest::Contains("memory limit"), gl::Error);
    cuda_memory_info(&free1, nullptr);
    CHECK(free1 == free0);
    auto fits = make_cuda_runtime(none, RuntimeOptions{need});
    CHECK(fits->allocated_bytes(Category::activations) == none.arena_bytes[size_t(Category::activations)]);
    for (auto& [v, d] : n.leaves) fits->write_f32(v, d);
    for (int k = 0; k < 3; k++) fits->run();  // eager, captured, replayed: the graph executable exists
    fits->synchronize();
    size_t free2 = 0;
    cuda_memory_info(&free2, nullptr);
    CHECK_MESSAGE(free0 - free2 <= need, "the runtime holds ", free0 - free2, " bytes, the limit counted ", need);
    CHECK(fits->memory_report().find("after the CUDA graph") != std::string::npos);
}

// n elements through `steps` AdamW8bit steps on the CPU and on CUDA, a NaN gradient every 10th step.
static void adam8bit_vs_cpu(int64_t n, int steps) {
    CAPTURE(n);
    Graph g;
    ValueId p = g.param("p", DType::f32, {n});
    ValueId grad = g.input("grad", DType::f32, {n});
    int64_t blocks = (n + kAdam8bitBlock - 1) / kAdam8bitBlock;
    ValueId m = g.state("m", DType::u8, {n}), v = g.state("v", DType::u8, {n});
    ValueId am = g.state("am", DType::f32, {blocks}), av = g.state("av", DType::f32, {blocks});
    ValueId hyper = g.input("hyper", DType::f32, {kHyperSize});
    adamw8bit_step(g, p, grad, m, v, am, av, hyper);
    Plan plan = make_plan(g);
    auto cpu = make_cpu_runtime(plan);
    auto gpu = make_cuda_runtime(plan);
    std::mt19937 rng(3);
    auto p0 = randn(rng, n, 0.1f);
    std::vector<float> zeros(size_t(n), 0.0f), zb(size_t(blocks), 0.0f);
    for (Runtime* rt : {cpu.get(), gpu.get()}) {
        rt->write_f32(p, p0);
        rt->write_f32(m, std::vector<float>(size_t(n), 127.0f));  // code of 0 in the signed map
        rt->write_f32(v, zeros);
        rt->write_f32(am, zb);
        rt->write_f32(av, zb);
    }
    for (int step = 1; step <= steps; step++) {
        auto gd = randn(rng, n, 0.01f);
        if (step % 10 == 0) gd[size_t(step)] = NAN;
        std::vector<float> h{1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, float(step), 1.0f, 0.0f};
        for (Runtime* rt : {cpu.get(), gpu.get()}) {
            rt->write_f32(grad, gd);
            rt->write_f32(hyper, h);
            rt->run();
        }
    }
    auto bit_equal = [](const std::vector<float>& a, const std::vector<float>& b) {
        int64_t differ = 0;
        for (size_t i = 0; i < a.size(); i++) differ += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
        return differ;
    };
    for (ValueId s : {p, m, v, am, av}) {  // bit-exact kernels
        const int64_t differ = bit_equal(gpu->read_f32(s), cpu->read_f32(s));
        CHECK_MESSAGE(differ == 0, differ, " values of ", g.v(s).name, " differ");
    }
}

TEST_CASE("AdamW8bit matches the CPU reference bit for bit") {
    // A few blocks with a ragged tail over 100 steps, then enough blocks that every warp walks
    // several of them, with a tail.
    adam8bit_vs_cpu(3 * 4096 + 123, 100);
    adam8bit_vs_cpu(4'000'000 + 77, 12);
}

TEST_CASE("AdamW8bit: the O(1) code search equals the binary search on all 2^32 floats") {
    for (bool is_signed : {true, false}) {
        gltest::Adam8bitCodeCheck r = gltest::adam8bit_codes_all_floats(is_signed);
        CHECK_MESSAGE(r.mismatches == 0, (is_signed ? "signed" : "unsigned"), " map: ", r.mismatches,
                      " floats disagree, first bits ", r.first_bits);
    }
}
