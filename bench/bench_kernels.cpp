// Kernel benchmarks at the SD1.5 shapes of ../shared/TARGETS.md, through the CUDA runtime
// (each op is a one- or two-node graph, replayed from its captured CUDA graph). Reports
// TFLOP/s (counters "TFLOPs") or GB/s ("GBps"). bench/compare_torch.py runs the same shapes
// through PyTorch and prints both side by side.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <random>

#include "ggml-lite/core/planner.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/ops/builder.h"

using namespace gl;

namespace {

struct Bench {
    Graph g;
    std::vector<ValueId> leaves;
    double flops = 0, bytes = 0;
};

std::unique_ptr<Runtime> prepare(Bench& b) {
    auto rt = make_cuda_runtime(make_plan(b.g));
    uint64_t state = 0x9e3779b97f4a7c15ull;  // xorshift64*: fast enough for 256 M values
    for (ValueId v : b.leaves) {
        std::vector<float> d(size_t(b.g.v(v).numel()));
        for (auto& e : d) {  // sum of two uniforms in [-0.5, 0.5): a triangular spread, sd ~0.4
            state ^= state >> 12, state ^= state << 25, state ^= state >> 27;
            const uint64_t r = state * 0x2545f4914f6cdd1dull;
            e = float(r >> 40) * 0x1p-24f + float((r >> 16) & 0xffffff) * 0x1p-24f - 1.0f;
        }
        if (b.g.v(v).name == "h") d = {1e-4f, 0.9f, 0.999f, 1e-8f, 0.01f, 10.0f, 1.0f, 0.0f};  // optimizer hyper
        rt->write_f32(v, d);
    }
    rt->run();  // eager warm-up, then capture
    rt->run();
    rt->synchronize();
    return rt;
}

void time_it(benchmark::State& st, Bench& b) {
    std::string why;
    if (!cuda_available(&why)) {
        st.SkipWithError(why.c_str());
        return;
    }
    auto rt = prepare(b);
    // One benchmark iteration = `reps` launches back to back, timed together (so the reported time
    // is per 20 launches; the rate counters divide the work of all launches by all the time).
    const int reps = 20;
    for (auto _ : st) {
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < reps; i++) rt->run();
        rt->synchronize();
        st.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    if (b.flops > 0)
        st.counters["TFLOPs"] = benchmark::Counter(b.flops * reps * 1e-12, benchmark::Counter::kIsIterationInvariantRate);
    if (b.bytes > 0)
        st.counters["GBps"] = benchmark::Counter(b.bytes * reps * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
    st.SetItemsProcessed(st.iterations() * reps);
}

void BM_linear(benchmark::State& st) {
    int64_t M = st.range(0), N = st.range(1), K = st.range(2);
    Bench b;
    ValueId x = b.g.input("x", DType::bf16, {M, K}), w = b.g.weight("w", DType::bf16, {N, K});
    b.leaves = {x, w};
    b.g.mark_output(linear(b.g, x, w));
    b.flops = 2.0 * double(M) * double(N) * double(K);
    time_it(st, b);
}
BENCHMARK(BM_linear)->Args({32768, 320, 320})->Args({32768, 2560, 320})->Args({32768, 320, 1280})->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_conv3x3(benchmark::State& st) {
    int64_t B = 8, HW = st.range(0), C = st.range(1);
    Bench b;
    ValueId x = b.g.input("x", DType::bf16, {B, HW, HW, C}), w = b.g.weight("w", DType::bf16, {C, 3, 3, C});
    ValueId bias = b.g.weight("b", DType::bf16, {C});
    b.leaves = {x, w, bias};
    b.g.mark_output(conv2d(b.g, x, w, bias, 1, 1));
    b.flops = 2.0 * double(B * HW * HW) * double(C) * double(9 * C);
    time_it(st, b);
}
BENCHMARK(BM_conv3x3)->Args({64, 320})->Args({32, 640})->Args({16, 1280})->Args({8, 1280})->UseManualTime()->Unit(benchmark::kMicrosecond);

// Attention forward + backward: attention, then attention_grad from a given upstream gradient.
void BM_attention_fwd_bwd(benchmark::State& st) {
    int64_t B = 8, H = 8, L = st.range(0), S = st.range(1), d = st.range(2);
    Bench b;
    ValueId q = b.g.input("q", DType::bf16, {B, L, H, d});
    ValueId k = b.g.input("k", DType::bf16, {B, S, H, d});
    ValueId v = b.g.input("v", DType::bf16, {B, S, H, d});
    ValueId go = b.g.input("go", DType::bf16, {B, L, H, d});
    b.leaves = {q, k, v, go};
    ValueId o = attention(b.g, q, k, v);
    ValueId lse = b.g.nodes.back().out[1];
    for (ValueId y : b.g.apply(Op::attention_grad, {q, k, v, o, lse, go})) b.g.mark_output(y);
    b.flops = 3.5 * 4.0 * double(B * H) * double(L) * double(S) * double(d);
    time_it(st, b);
}
BENCHMARK(BM_attention_fwd_bwd)
    ->Args({4096, 4096, 40})->Args({1024, 1024, 80})->Args({256, 256, 160})->Args({4096, 77, 40})
    ->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_attention_fwd(benchmark::State& st) {
    int64_t B = 8, H = 8, L = st.range(0), S = st.range(1), d = st.range(2);
    Bench b;
    ValueId q = b.g.input("q", DType::bf16, {B, L, H, d});
    ValueId k = b.g.input("k", DType::bf16, {B, S, H, d});
    ValueId v = b.g.input("v", DType::bf16, {B, S, H, d});
    b.leaves = {q, k, v};
    b.g.mark_output(attention(b.g, q, k, v));
    b.flops = 4.0 * double(B * H) * double(L) * double(S) * double(d);
    time_it(st, b);
}
BENCHMARK(BM_attention_fwd)
    ->Args({4096, 4096, 40})->Args({1024, 1024, 80})->Args({256, 256, 160})->Args({4096, 77, 40})
    ->UseManualTime()->Unit(benchmark::kMicrosecond);

// Optimizer steps on 256 M parameters; bytes = what the step must read and write.
void BM_adamw8bit(benchmark::State& st) {
    int64_t n = 256LL << 20, blocks = (n + kAdam8bitBlock - 1) / kAdam8bitBlock;
    Bench b;
    ValueId p = b.g.param("p", DType::f32, {n}), gr = b.g.input("g", DType::f32, {n});
    ValueId m = b.g.state("m", DType::u8, {n}), v = b.g.state("v", DType::u8, {n});
    ValueId am = b.g.state("am", DType::f32, {blocks}), av = b.g.state("av", DType::f32, {blocks});
    ValueId h = b.g.input("h", DType::f32, {kHyperSize});
    b.leaves = {p, gr, h};
    adamw8bit_step(b.g, p, gr, m, v, am, av, h);
    b.bytes = double(n) * (4 + 4 + 1 + 1 + 4 + 1 + 1) + double(blocks) * 16;
    time_it(st, b);
}
BENCHMARK(BM_adamw8bit)->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_adamw_fp32(benchmark::State& st) {
    int64_t n = 256LL << 20;
    Bench b;
    ValueId p = b.g.param("p", DType::f32, {n}), gr = b.g.input("g", DType::f32, {n});
    ValueId m = b.g.state("m", DType::f32, {n}), v = b.g.state("v", DType::f32, {n});
    ValueId h = b.g.input("h", DType::f32, {kHyperSize});
    b.leaves = {p, gr, m, h};
    adamw_step(b.g, p, gr, m, v, h);
    b.bytes = double(n) * 28;
    time_it(st, b);
}
BENCHMARK(BM_adamw_fp32)->UseManualTime()->Unit(benchmark::kMicrosecond);

// Device copy bandwidth, the ceiling for the optimizer figures.
void BM_copy(benchmark::State& st) {
    int64_t n = 256LL << 20;
    Bench b;
    ValueId x = b.g.input("x", DType::f32, {n});
    b.leaves = {x};
    b.g.mark_output(contiguous(b.g, x, true));
    b.bytes = double(n) * 8;
    time_it(st, b);
}
BENCHMARK(BM_copy)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace


