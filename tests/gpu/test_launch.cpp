// What takes host work and launches off the step on CUDA: the step's noise drawn on the device
// (normal_noise) equals the CPU's bit for bit; the multi-tensor optimizer steps and casts over
// hundreds of tensors equal the CPU's bit for bit; inputs written without waiting (staged through
// pinned buffers) reach every run in order while the stream is still busy.
#include <doctest/doctest.h>

#include <bit>
#include <cstring>
#include <random>

#include "ggml-lite/core/planner.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/ops/builder.h"
#include "ggml-lite/ops/rng_normal.h"

using namespace gl;

namespace {

int64_t bits_differ(const std::vector<float>& a, const std::vector<float>& b) {
    REQUIRE(a.size() == b.size());
    int64_t n = 0;
    for (size_t i = 0; i < a.size(); i++) n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return n;
}

std::vector<float> uniform(std::mt19937& rng, int64_t n, float lo, float hi) {
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> v(size_t(n));
    for (float& e : v) e = u(rng);
    return v;
}

}  // namespace

TEST_CASE("CUDA normal_noise equals the CPU's bit for bit, with and without offset noise") {
    for (const double offset : {0.0, 0.1}) {
        CAPTURE(offset);
        Graph g;
        const ValueId draw = g.input("draw", DType::i32, {kNoiseDrawSize});
        const ValueId z = normal_noise(g, draw, {4, 64, 64, 16});  // 2^18 elements
        g.mark_output(z);
        Plan plan = make_plan(g);
        auto cpu = make_cpu_runtime(plan);
        auto gpu = make_cuda_runtime(plan);
        gpu->poison(0xff);
        for (uint64_t counter : {uint64_t(0), uint64_t(1) << 40}) {
            std::vector<int32_t> d(kNoiseDrawSize);
            noise_draw_set(d.data(), kNdSeed, 0x9e3779b97f4a7c15ull);
            noise_draw_set(d.data(), kNdCounter, counter);
            noise_draw_set(d.data(), kNdOffset, std::bit_cast<uint64_t>(offset));
            for (Runtime* rt : {cpu.get(), gpu.get()}) {
                rt->write(draw, d.data(), DType::i32);
                rt->run();  // the second run replays the captured graph with the new position
            }
            CHECK(bits_differ(gpu->read_f32(z), cpu->read_f32(z)) == 0);
        }
    }
}

TEST_CASE("CUDA multi-tensor AdamW, Lion and casts over 700 tensors equal the CPU's bit for bit") {
    std::mt19937 rng(11);
    Graph g;
    const ValueId hyper = g.input("hyper", DType::f32, {kHyperSize});
    std::vector<ValueId> p, gr, m, v, q, gq, mq;
    for (int k = 0; k < 700; k++) {  // more tensors than one launch table holds: two launches
        const int64_t n = 1 + int64_t(rng() % 3000);
        p.push_back(g.param("p" + std::to_string(k), DType::f32, {n}));
        gr.push_back(g.input("g" + std::to_string(k), DType::f32, {n}));
        m.push_back(g.state("m" + std::to_string(k), DType::f32, {n}));
        v.push_back(g.state("v" + std::to_string(k), DType::f32, {n}));
        q.push_back(g.param("q" + std::to_string(k), DType::f32, {n}));
        gq.push_back(g.input("gq" + std::to_string(k), DType::f32, {n}));
        mq.push_back(g.state("mq" + std::to_string(k), DType::f32, {n}));
    }
    const std::vector<ValueId> half = cast_multi(g, p, DType::bf16);
    for (ValueId h : half) g.mark_output(h);
    adamw_step(g, p, gr, m, v, hyper);
    lion_step(g, q, gq, mq, hyper);
    Plan plan = make_plan(g);
    auto cpu = make_cpu_runtime(plan);
    auto gpu = make_cuda_runtime(plan);
    gpu->poison(0xff);
    for (size_t k = 0; k < p.size(); k++) {
        const int64_t n = g.v(p[k]).numel();
        const auto p0 = uniform(rng, n, -1, 1), q0 = uniform(rng, n, -1, 1), zero = std::vector<float>(size_t(n), 0.0f);
        for (Runtime* rt : {cpu.get(), gpu.get()}) {
            rt->write_f32(p[k], p0);
            rt->write_f32(q[k], q0);
            for (ValueId s : {m[k], v[k], mq[k]}) rt->write_f32(s, zero);
        }
    }
    for (int step = 1; step <= 3; step++) {
        const std::vector<float> h{1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, float(step), 1.0f, 0.0f};
        for (size_t k = 0; k < p.size(); k++) {
            const auto a = uniform(rng, g.v(p[k]).numel(), -0.1f, 0.1f), b = uniform(rng, g.v(p[k]).numel(), -0.1f, 0.1f);
            for (Runtime* rt : {cpu.get(), gpu.get()}) {
                rt->write_f32(gr[k], a);
                rt->write_f32(gq[k], b);
            }
        }
        for (Runtime* rt : {cpu.get(), gpu.get()}) {
            rt->write_f32(hyper, h);
            rt->run();
        }
    }
    int64_t differ = 0;
    for (size_t k = 0; k < p.size(); k++)
        for (ValueId s : {p[k], m[k], v[k], q[k], mq[k], half[k]}) differ += bits_differ(gpu->read_f32(s), cpu->read_f32(s));
    CHECK(differ == 0);
}

TEST_CASE("CUDA inputs written without waiting reach every run in order, the stream still busy") {
    // Each run does a large matmul first, so the host writes the next runs' inputs while earlier
    // ones still wait on the stream; acc sums what every run was given.
    Graph g;
    const ValueId a = g.weight("a", DType::f32, {1024, 1024});
    const ValueId x = g.input("x", DType::f32, {1024});
    const ValueId ctl = g.input("ctl", DType::f32, {2});
    const ValueId acc = g.state("acc", DType::f32, {1024});
    const ValueId busy = matmul(g, a, a);
    g.mark_output(busy);
    accumulate(g, acc, x, ctl);
    auto gpu = make_cuda_runtime(make_plan(g));
    std::mt19937 rng(2);
    gpu->write_f32(a, uniform(rng, 1024 * 1024, -1, 1));
    std::vector<double> want(1024, 0.0);
    for (int run = 0; run < 40; run++) {
        std::vector<float> xs(1024);
        for (size_t i = 0; i < xs.size(); i++) {
            xs[i] = float(run * 1024 + int(i));  // exact in f32, and so are the sums
            want[i] += xs[i];
        }
        gpu->write_f32(x, xs);
        gpu->write_f32(ctl, {run == 0 ? 1.0f : 0.0f, 1.0f});
        gpu->run();
    }
    const std::vector<float> got = gpu->read_f32(acc);
    int64_t wrong = 0;
    for (size_t i = 0; i < got.size(); i++) wrong += double(got[i]) != want[i];
    CHECK(wrong == 0);
}
