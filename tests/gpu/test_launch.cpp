// What takes host work and launches off the step on CUDA: the step's noise drawn on the device
// (normal_noise) equals the CPU's bit for bit, eagerly, captured and replayed; the multi-tensor
// optimizer steps and casts over hundreds of tensors equal one node per tensor and the CPU bit for
// bit; grad_stats over more gradients than one launch table holds; inputs written without waiting
// (staged through pinned buffers) reach every run in order while the stream is still busy; and the
// whole tiny training step, its draws in the graph, runs the same eagerly and from its CUDA graph.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>

#include "models/sd15/sd_config.h"
#include "ggml-lite/core/planner.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/io/safetensors.h"
#include "ggml-lite/ops/builder.h"
#include "ggml-lite/ops/optim_types.h"
#include "ggml-lite/ops/rng_normal.h"
#include "optim/optimizer_config.h"
#include "train/trainer.h"
#include "../train_fixtures.h"

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
    std::vector<float> v(static_cast<size_t>(n));
    for (float& e : v) e = u(rng);
    return v;
}

// One parameter set of an optimizer test: each tensor's leaves, made alike for the multi-tensor
// node and for the per-tensor nodes.
struct Tensors {
    std::vector<ValueId> p, g, m, v, am, av;
};

Tensors make_tensors(Graph& g, const std::string& tag, const std::vector<int64_t>& sizes, bool q8) {
    Tensors t;
    for (size_t k = 0; k < sizes.size(); k++) {
        const std::string n = tag + std::to_string(k);
        const int64_t e = sizes[k];
        t.p.push_back(g.param(n + ".p", DType::f32, {e}));
        t.g.push_back(g.input(n + ".g", DType::f32, {e}));
        t.m.push_back(g.state(n + ".m", q8 ? DType::u8 : DType::f32, {e}));
        t.v.push_back(g.state(n + ".v", q8 ? DType::u8 : DType::f32, {e}));
        if (q8) {
            t.am.push_back(g.state(n + ".am", DType::f32, {(e + kAdam8bitBlock - 1) / kAdam8bitBlock}));
            t.av.push_back(g.state(n + ".av", DType::f32, {(e + kAdam8bitBlock - 1) / kAdam8bitBlock}));
        }
    }
    return t;
}

std::vector<int64_t> random_sizes(std::mt19937& rng, int count, int64_t most) {
    std::vector<int64_t> s;
    for (int k = 0; k < count; k++) s.push_back(1 + int64_t(rng() % uint64_t(most)));
    return s;
}

}  // namespace

TEST_CASE("CUDA normal_noise equals the CPU's bit for bit, eager, captured and replayed, with and without offset noise") {
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
        // Run 1 eager, run 2 captured, run 3 replayed: each must read the position written for it.
        for (uint64_t counter : {uint64_t(0), uint64_t(1) << 40, uint64_t(12345)}) {
            CAPTURE(counter);
            std::vector<int32_t> d(kNoiseDrawSize);
            noise_draw_set(d.data(), kNdSeed, 0x9e3779b97f4a7c15ull);
            noise_draw_set(d.data(), kNdCounter, counter);
            noise_draw_set(d.data(), kNdOffset, std::bit_cast<uint64_t>(offset));
            for (Runtime* rt : {cpu.get(), gpu.get()}) {
                rt->write(draw, d.data(), DType::i32);
                rt->run();
            }
            CHECK(bits_differ(gpu->read_f32(z), cpu->read_f32(z)) == 0);
        }
    }
}

TEST_CASE("CUDA multi-tensor AdamW, AdamW8bit, Lion and casts equal one node per tensor and the CPU, bit for bit") {
    std::mt19937 rng(11);
    Graph g;
    const ValueId hyper = g.input("hyper", DType::f32, {kHyperSize});
    // More tensors than one launch table holds (639 / 479 / 1279 for 4 / 6 / 2 pointers a tensor):
    // every op launches twice.
    const std::vector<int64_t> sizes = random_sizes(rng, 700, 3000), sizes8 = random_sizes(rng, 500, 9000);
    const Tensors adam = make_tensors(g, "adam", sizes, false), adam1 = make_tensors(g, "adam1", sizes, false);
    const Tensors lion = make_tensors(g, "lion", sizes, false), lion1 = make_tensors(g, "lion1", sizes, false);
    const Tensors q8 = make_tensors(g, "q8", sizes8, true), q81 = make_tensors(g, "q81", sizes8, true);
    const std::vector<ValueId> half = cast_multi(g, adam.p, DType::bf16);
    std::vector<ValueId> half1;
    for (ValueId p : adam1.p) half1.push_back(cast(g, p, DType::bf16));
    for (ValueId h : half) g.mark_output(h);
    for (ValueId h : half1) g.mark_output(h);
    adamw_step(g, adam.p, adam.g, adam.m, adam.v, hyper);
    lion_step(g, lion.p, lion.g, lion.m, hyper);
    adamw8bit_step(g, q8.p, q8.g, q8.m, q8.v, q8.am, q8.av, hyper);
    for (size_t k = 0; k < sizes.size(); k++) {
        adamw_step(g, adam1.p[k], adam1.g[k], adam1.m[k], adam1.v[k], hyper);
        lion_step(g, lion1.p[k], lion1.g[k], lion1.m[k], hyper);
    }
    for (size_t k = 0; k < sizes8.size(); k++)
        adamw8bit_step(g, q81.p[k], q81.g[k], q81.m[k], q81.v[k], q81.am[k], q81.av[k], hyper);
    Plan plan = make_plan(g);
    auto cpu = make_cpu_runtime(plan);
    auto gpu = make_cuda_runtime(plan);
    gpu->poison(0xff);
    const float zero_signed = float(adam8bit_quantize(adam8bit_qmap(true), 0.0f));
    const float zero_unsigned = float(adam8bit_quantize(adam8bit_qmap(false), 0.0f));
    auto start = [&](const Tensors& a, const Tensors& b, size_t k, bool is_q8) {
        const int64_t n = g.v(a.p[k]).numel();
        const auto p0 = uniform(rng, n, -1, 1);
        const std::vector<float> zero(size_t(n), 0.0f), zm(size_t(n), zero_signed), zv(size_t(n), zero_unsigned);
        const std::vector<float> absmax(size_t((n + kAdam8bitBlock - 1) / kAdam8bitBlock), 0.0f);
        for (Runtime* rt : {cpu.get(), gpu.get()})
            for (const Tensors* t : {&a, &b}) {
                rt->write_f32(t->p[k], p0);
                rt->write_f32(t->m[k], is_q8 ? zm : zero);
                rt->write_f32(t->v[k], is_q8 ? zv : zero);
                if (is_q8) {
                    rt->write_f32(t->am[k], absmax);
                    rt->write_f32(t->av[k], absmax);
                }
            }
    };
    for (size_t k = 0; k < sizes.size(); k++) {
        start(adam, adam1, k, false);
        start(lion, lion1, k, false);
    }
    for (size_t k = 0; k < sizes8.size(); k++) start(q8, q81, k, true);
    auto grads = [&](const Tensors& a, const Tensors& b) {
        for (size_t k = 0; k < a.p.size(); k++) {
            const auto d = uniform(rng, g.v(a.p[k]).numel(), -0.1f, 0.1f);
            for (Runtime* rt : {cpu.get(), gpu.get()}) {
                rt->write_f32(a.g[k], d);
                rt->write_f32(b.g[k], d);
            }
        }
    };
    for (int step = 1; step <= 3; step++) {  // eager, captured, replayed
        const std::vector<float> h{1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, float(step), 1.0f, 0.0f};
        grads(adam, adam1);
        grads(lion, lion1);
        grads(q8, q81);
        for (Runtime* rt : {cpu.get(), gpu.get()}) {
            rt->write_f32(hyper, h);
            rt->run();
        }
    }
    int64_t vs_single = 0, vs_cpu = 0;
    auto compare = [&](ValueId multi, ValueId single) {
        const std::vector<float> got = gpu->read_f32(multi);
        vs_single += bits_differ(got, gpu->read_f32(single));
        vs_cpu += bits_differ(got, cpu->read_f32(multi));
    };
    for (size_t k = 0; k < sizes.size(); k++) {
        for (auto [a, b] : {std::pair{&adam, &adam1}, std::pair{&lion, &lion1}}) {
            compare(a->p[k], b->p[k]);
            compare(a->m[k], b->m[k]);
        }
        compare(adam.v[k], adam1.v[k]);
        compare(half[k], half1[k]);
    }
    for (size_t k = 0; k < sizes8.size(); k++)
        for (auto [a, b] : {std::pair{q8.p[k], q81.p[k]}, {q8.m[k], q81.m[k]}, {q8.v[k], q81.v[k]},
                            {q8.am[k], q81.am[k]}, {q8.av[k], q81.av[k]}})
            compare(a, b);
    CHECK(vs_single == 0);
    CHECK(vs_cpu == 0);
}

TEST_CASE("CUDA grad_stats over 1500 gradients (two launch tables) gives the CPU's norm and sees a NaN in the second") {
    std::mt19937 rng(5);
    const std::vector<int64_t> sizes = random_sizes(rng, 1500, 700);
    for (const bool nan : {false, true}) {
        CAPTURE(nan);
        Graph g;
        std::vector<ValueId> grads;
        for (size_t k = 0; k < sizes.size(); k++) grads.push_back(g.input("g" + std::to_string(k), DType::f32, {sizes[k]}));
        const ValueId st = grad_stats(g, grads, kNoValue, 1.0f);
        g.mark_output(st);
        Plan plan = make_plan(g);
        auto cpu = make_cpu_runtime(plan);
        auto gpu = make_cuda_runtime(plan);
        for (size_t k = 0; k < sizes.size(); k++) {
            std::vector<float> d = uniform(rng, sizes[k], -0.01f, 0.01f);
            if (nan && k == 1400) d.back() = NAN;
            for (Runtime* rt : {cpu.get(), gpu.get()}) rt->write_f32(grads[k], d);
        }
        for (Runtime* rt : {cpu.get(), gpu.get()}) rt->run();
        const std::vector<float> want = cpu->read_f32(st), got = gpu->read_f32(st);
        CHECK(got[kGsNonfinite] == want[kGsNonfinite]);
        CHECK(got[kGsNonfinite] == (nan ? 1.0f : 0.0f));
        if (!nan) {
            CHECK(got[kGsNorm] == doctest::Approx(want[kGsNorm]).epsilon(1e-6));
            CHECK(got[kGsMul] == doctest::Approx(want[kGsMul]).epsilon(1e-6));
        }
    }
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

TEST_CASE("CUDA training step: the graph's draws are the host's, and eager steps equal captured and replayed ones") {
    // The tiny LoRA step in bf16 with offset noise, min-SNR weights and the Huber loss: one runtime
    // runs as usual (eager, captured, then replayed), one profiled (every run eager). Each step's
    // draws must be what draw_micro_batch makes on the host from the trainer's stream, and both
    // runtimes must give the same losses and LoRA, bit for bit.
    train::StepOptions o = train_test::tiny_options(train::Precision::bf16, 2, 1, 1e-3f);
    o.loss = LossKind::huber;
    o.optimizer = optim::parse_optimizer("AdamW8bit", {});
    train::TrainerOptions to;
    to.seed = 23;
    to.objective.loss = o.loss;
    to.objective.noise_offset = 0.1;
    to.objective.min_snr_gamma = 5.0;
    struct Run {
        std::unique_ptr<train::StepGraph> s;
        std::unique_ptr<Runtime> rt;
        std::unique_ptr<train::Trainer> tr;
    };
    auto make = [&](bool profiled) {
        Run r;
        r.s = train::build_step(o);
        for (ValueId v : {r.s->noise, r.s->sqrt_ac, r.s->loss_weights, r.s->huber_c}) r.s->g.mark_output(v);
        r.rt = make_cuda_runtime(make_plan(r.s->g, {Recompute::blocks}));
        r.rt->poison(0xff);
        io::SafetensorsFile f(train_test::kTinyUnet);
        sd::load_unet(*r.s->unet_weights, sd::sd_config(*o.config).unet, f, *r.rt);
        r.tr = std::make_unique<train::Trainer>(*r.s, *r.rt, to);
        r.tr->init(4);
        r.rt->set_profiling(profiled);
        return r;
    };
    Run graph = make(false), eager = make(true);
    const int64_t n = graph.s->latent_numel();
    const std::vector<float> x0 = train_test::structured_latents(2, 7);
    const std::vector<float> ctx = train_test::normal(size_t(graph.s->context_numel()), 8);
    const diffusion::DdpmSchedule sched = diffusion::DdpmSchedule::sd15();
    diffusion::NoiseRng host{to.seed, 0};
    for (int step = 0; step < 4; step++) {
        CAPTURE(step);
        const train::StepReport a = graph.tr->step(x0, ctx), b = eager.tr->step(x0, ctx);
        const train::MicroBatch mb = train::draw_micro_batch(to.objective, sched, 2, n, graph.s->latent_channels(), host);
        host.next_u64();  // the dropout seed
        CHECK(bits_differ(graph.rt->read_f32(graph.s->noise), mb.noise) == 0);
        CHECK(graph.rt->read_f32(graph.s->sqrt_ac) == mb.sqrt_ac);
        CHECK(graph.rt->read_f32(graph.s->loss_weights) == mb.weights);
        CHECK(graph.rt->read_f32(graph.s->huber_c) == mb.huber_c);
        CHECK(std::bit_cast<uint64_t>(a.loss) == std::bit_cast<uint64_t>(b.loss));
        CHECK(a.per_sample == b.per_sample);
    }
    int64_t differ = 0;
    for (size_t k = 0; k < graph.s->net->parameters().size(); k++)
        differ += bits_differ(graph.rt->read_f32(graph.s->net->parameters()[k]),
                              eager.rt->read_f32(eager.s->net->parameters()[k]));
    CHECK(differ == 0);
}
