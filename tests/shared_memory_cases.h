// The shared-memory scenarios run on both backends (tests/test_shared_memory.cpp on the CPU,
// tests/gpu/test_shared_memory.cpp on CUDA): bucket steps and a forward-only plan on one copy of
// the weights, LoRA and optimizer state against separate runtimes, bit for bit; and the tiny
// UNet's training step in two buckets with a forward-only UNet (a sampler's) beside them.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "models/sd15/sd_config.h"
#include "ggml-lite/core/autodiff.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/core/shared_memory.h"
#include "ggml-lite/io/safetensors.h"
#include "ggml-lite/ops/builder.h"
#include "train/trainer.h"
#include "train_fixtures.h"

namespace shared_test {

using namespace gl;

constexpr int64_t kIn = 6, kOut = 8, kRank = 2;

// y = silu(linear(x, W, b) + up(down(x))); with `train`, an MSE loss, its backward pass and an
// AdamW step of both LoRA matrices. `rows` is the bucket shape; `extra` adds a frozen weight
// only this plan holds (a sampler's text encoder), declared first; `reversed` declares the
// leaves in the other order. Both give the plan's own layout other offsets than the shared one.
struct Model {
    Graph g;
    ValueId x = kNoValue, target = kNoValue, hyper = kNoValue, y = kNoValue, loss = kNoValue;
    ValueId w = kNoValue, b = kNoValue, down = kNoValue, up = kNoValue, extra = kNoValue;
    std::vector<ValueId> state;  // m, v of down, then of up (whatever the order declared)
    Gradients grads;
};

inline std::unique_ptr<Model> build(int64_t rows, bool train, bool extra = false, bool reversed = false) {
    auto m = std::make_unique<Model>();
    Graph& g = m->g;
    m->x = g.input("x", DType::f32, {rows, kIn});
    if (extra) m->extra = g.weight("te.w", DType::f32, {kIn, kIn});
    if (reversed) {
        m->up = g.param("lora.up", DType::f32, {kOut, kRank});
        m->down = g.param("lora.down", DType::f32, {kRank, kIn});
        m->b = g.weight("base.b", DType::bf16, {kOut});
        m->w = g.weight("base.w", DType::f32, {kOut, kIn});
    } else {
        m->w = g.weight("base.w", DType::f32, {kOut, kIn});
        m->b = g.weight("base.b", DType::bf16, {kOut});
        m->down = g.param("lora.down", DType::f32, {kRank, kIn});
        m->up = g.param("lora.up", DType::f32, {kOut, kRank});
    }
    ValueId h = extra ? linear(g, m->x, m->extra) : m->x;
    {
        Segment seg(g, "block");
        ValueId base = linear(g, h, m->w, cast(g, m->b, DType::f32));
        m->y = silu(g, add(g, base, linear(g, linear(g, h, m->down), m->up)));
    }
    if (!train) {
        g.mark_output(m->y);
        return m;
    }
    m->target = g.input("target", DType::f32, {rows, kOut});
    m->hyper = g.input("hyper", DType::f32, {kHyperSize});
    m->loss = mse_loss(g, m->y, m->target);
    g.mark_output(m->loss);
    m->grads = backward(g, m->loss);
    m->state.assign(4, kNoValue);
    for (ValueId p : reversed ? std::vector{m->up, m->down} : std::vector{m->down, m->up}) {
        ValueId mo = g.state("opt." + g.v(p).name + ".m", DType::f32, g.shape(p));
        ValueId ve = g.state("opt." + g.v(p).name + ".v", DType::f32, g.shape(p));
        m->state[p == m->down ? 0 : 2] = mo;
        m->state[p == m->down ? 1 : 3] = ve;
        adamw_step(g, p, m->grads[p], mo, ve, m->hyper);
    }
    return m;
}

inline std::vector<float> uniform(int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& e : v) e = u(rng);
    return v;
}

// Every persistent leaf of the models: the weights, the LoRA and the optimizer state.
inline void write_persistent(Runtime& rt, const Model& m) {
    rt.write_f32(m.w, uniform(kOut * kIn, 1));
    rt.write_f32(m.b, uniform(kOut, 2));
    rt.write_f32(m.down, uniform(kRank * kIn, 3));
    rt.write_f32(m.up, uniform(kOut * kRank, 4));
    for (ValueId s : m.state) rt.write_f32(s, std::vector<float>(size_t(m.g.v(s).numel()), 0.0f));
    if (m.extra != kNoValue) rt.write_f32(m.extra, uniform(kIn * kIn, 5));
}

// Copies the trained values (LoRA and state) from one runtime to another.
inline void copy_trained(const Runtime& from, const Model& mf, Runtime& to, const Model& mt) {
    to.write_f32(mt.down, from.read_f32(mf.down));
    to.write_f32(mt.up, from.read_f32(mf.up));
    for (size_t i = 0; i < mt.state.size() && i < mf.state.size(); i++) to.write_f32(mt.state[i], from.read_f32(mf.state[i]));
}

// Writes a step's inputs (inputs live in the shared activation arena: written before every run).
inline void write_step_inputs(Runtime& rt, const Model& m, uint32_t seed) {
    const int64_t rows = m.g.shape(m.x).d[0];
    rt.write_f32(m.x, uniform(rows * kIn, seed));
    if (m.target != kNoValue) {
        rt.write_f32(m.target, uniform(rows * kOut, seed + 100));
        rt.write_f32(m.hyper, {0.05f, 0.9f, 0.999f, 1e-8f, 0.0f, 1.0f, 1.0f, 0.0f});
    }
}

inline size_t align256(size_t x) { return (x + 255) / 256 * 256; }

inline Plan plan_of(const Model& m, Recompute rc = Recompute::none) {
    PlanOptions o;
    o.recompute = rc;
    return make_plan(m.g, o);
}

// Copies every parameter and optimizer state leaf of graph gf that graph gt holds under the same
// name (separate runtimes standing in for shared memory).
inline void copy_trained_by_name(const Runtime& from, const Graph& gf, Runtime& to, const Graph& gt) {
    std::unordered_map<std::string, ValueId> by_name;
    for (ValueId v = 0; v < gf.value_count(); v++)
        if (gf.v(v).role == Role::param || gf.v(v).role == Role::state) by_name.emplace(gf.v(v).name, v);
    int copied = 0;
    for (ValueId v = 0; v < gt.value_count(); v++) {
        auto it = by_name.find(gt.v(v).name);
        if (it == by_name.end() || (gt.v(v).role != Role::param && gt.v(v).role != Role::state)) continue;
        to.write_f32(v, from.read_f32(it->second));
        copied++;
    }
    REQUIRE(copied == int(by_name.size()));
}

// A runtime of `backend`, on `mem` when given.
inline std::unique_ptr<Runtime> runtime_on(const std::string& backend, Plan p,
                                           std::shared_ptr<SharedMemory> mem = nullptr) {
    if (backend == "cuda") return mem ? make_cuda_runtime(std::move(p), mem) : make_cuda_runtime(std::move(p));
    return mem ? make_cpu_runtime(std::move(p), mem) : make_cpu_runtime(std::move(p));
}

// Bucket a (4 rows), bucket b (12 rows, leaves declared in the other order, recompute blocks) and
// a forward-only plan s with a weight of its own, `rounds` times a step of a, a step of b and a run
// of s on shared memory, each against a separate runtime given the trained values by copy. On CUDA
// the second run of each runtime is captured and later ones replay: the captured graphs read the
// values the other plans wrote.
inline void buckets_match_separate_runtimes(const std::string& backend, int rounds) {
    auto a = build(4, true), b = build(12, true, false, true), s = build(3, false, true);
    Plan pa = plan_of(*a), pb = plan_of(*b, Recompute::blocks), ps = plan_of(*s);
    // The plans' own layouts place the shared values elsewhere than the shared layout (a's).
    CHECK(pa.offset[size_t(a->down)] != pb.offset[size_t(b->down)]);
    CHECK(pa.offset[size_t(a->w)] != ps.offset[size_t(s->w)]);
    auto mem = make_shared_memory(make_shared_layout({&pa, &pb, &ps}, backend));
    auto ra = runtime_on(backend, pa, mem), rb = runtime_on(backend, pb, mem), rs = runtime_on(backend, ps, mem);
    auto ua = runtime_on(backend, pa), ub = runtime_on(backend, pb), us = runtime_on(backend, ps);
    CHECK(check_overlaps(ra->plan()) == "");
    CHECK(check_overlaps(rb->plan()) == "");
    CHECK(check_overlaps(rs->plan()) == "");
    for (Runtime* r : {ra.get(), ub.get(), ua.get(), us.get()}) r->poison(0xff);

    // One write of the shared leaves serves all three plans.
    write_persistent(*ra, *a);
    rs->write_f32(s->extra, uniform(kIn * kIn, 5));
    write_persistent(*ua, *a);
    write_persistent(*ub, *b);
    write_persistent(*us, *s);
    const std::vector<float> down0 = ra->read_f32(a->down);
    CHECK(rb->read_f32(b->down) == down0);
    CHECK(rs->read_f32(s->down) == down0);

    for (int r = 0; r < rounds; r++) {
        CAPTURE(r);
        const uint32_t seed = 10 + 100 * uint32_t(r);
        // A step in bucket a moves the LoRA and state bucket b and the sampler see.
        if (r > 0) copy_trained(*ub, *b, *ua, *a);
        write_step_inputs(*ra, *a, seed);
        ra->run();
        write_step_inputs(*ua, *a, seed);
        ua->run();
        CHECK(ra->read_f32(a->loss) == ua->read_f32(a->loss));
        CHECK(ra->read_f32(a->grads[a->down]) == ua->read_f32(a->grads[a->down]));
        CHECK(ra->read_f32(a->down) != down0);
        CHECK(rb->read_f32(b->down) == ua->read_f32(a->down));
        CHECK(rs->read_f32(s->up) == ua->read_f32(a->up));
        for (size_t i = 0; i < a->state.size(); i++) CHECK(rb->read_f32(b->state[i]) == ua->read_f32(a->state[i]));

        // Then a step in bucket b on what a left (its inputs written anew: a overwrote them).
        copy_trained(*ua, *a, *ub, *b);
        write_step_inputs(*rb, *b, seed + 1);
        rb->run();
        write_step_inputs(*ub, *b, seed + 1);
        ub->run();
        CHECK(rb->read_f32(b->loss) == ub->read_f32(b->loss));
        CHECK(ra->read_f32(a->up) == ub->read_f32(b->up));
        for (size_t i = 0; i < b->state.size(); i++) CHECK(ra->read_f32(a->state[i]) == ub->read_f32(b->state[i]));

        // The forward-only plan on the LoRA b trained.
        copy_trained(*ub, *b, *us, *s);
        write_step_inputs(*rs, *s, seed + 2);
        rs->run();
        write_step_inputs(*us, *s, seed + 2);
        us->run();
        CHECK(rs->read_f32(s->y) == us->read_f32(s->y));
    }
}

// The tiny UNet's training step in an 8x8 and an 8x16 bucket and a forward-only UNet with the
// same LoRA (a sampler's): one copy of the UNet's weights, loaded once; `steps` times a step in
// the square bucket, an evaluation and a step in the wide one and a sampler run, each against
// separate runtimes (and step graphs: each holds its optimizer's host-side step count, so the
// shared ones count as the separate ones do) given the LoRA and state by copy.
inline void unet_buckets_share(const std::string& backend, int steps) {
    using namespace train_test;
    const train::StepOptions oa = tiny_options(train::Precision::fp32, 1, 1, 1e-3f);
    train::StepOptions ob = oa;
    ob.latent_w = 2 * kSide;
    auto sa = train::build_step(oa), sb = train::build_step(ob);
    Graph gs;
    nn::Weights ws(gs, DType::f32);
    lora::LoraNetwork net(oa.lora);
    net.attach_unet(ws);
    ValueId xs = gs.input("latents", DType::f32, {1, kSide, kSide, 4}), ts = gs.input("timesteps", DType::f32, {1});
    ValueId cs = gs.input("context", DType::f32, {1, kTokens, sd::sd_config(*oa.config).unet.cross_attention_dim});
    ValueId pred = sd::unet_forward(ws, sd::sd_config(*oa.config).unet, xs, ts, cs);
    gs.mark_output(pred);

    Plan pa = make_plan(sa->g), pb = make_plan(sb->g, {Recompute::blocks}), ps = make_plan(gs);
    SharedLayout L = make_shared_layout({&pa, &pb, &ps}, backend);
    for (Category c : {Category::frozen, Category::trainable, Category::optimizer})
        CHECK(L.arena_bytes[size_t(c)] == pa.arena_bytes[size_t(c)]);
    CHECK(L.members[2].unshared_values == 0);
    CHECK(L.total_bytes() + 2 * pa.arena_bytes[size_t(Category::frozen)] <= L.unshared_bytes());

    auto mem = make_shared_memory(L);
    auto ra = runtime_on(backend, pa, mem), rb = runtime_on(backend, pb, mem), rs = runtime_on(backend, ps, mem);
    ra->poison(0xff);
    io::SafetensorsFile f(kTinyUnet);
    sd::load_unet(*sa->unet_weights, sd::sd_config(*oa.config).unet, f, *ra);  // once, for all three
    auto va = train::build_step(oa), vb = train::build_step(ob);
    auto ua = runtime_on(backend, make_plan(va->g)), ub = runtime_on(backend, make_plan(vb->g, {Recompute::blocks}));
    auto us = runtime_on(backend, ps);
    sd::load_unet(*va->unet_weights, sd::sd_config(*oa.config).unet, f, *ua);
    sd::load_unet(*vb->unet_weights, sd::sd_config(*ob.config).unet, f, *ub);
    sd::load_unet(ws, sd::sd_config(*oa.config).unet, f, *us);

    train::TrainerOptions to;
    to.seed = 3;
    train::Trainer ta(*sa, *ra, to), tb(*sb, *rb, to), uta(*va, *ua, to), utb(*vb, *ub, to);
    ta.init(5);
    uta.init(5);
    const std::vector<ValueId> lora_a = va->net->parameters(), lora_s = net.parameters();
    REQUIRE(lora_a.size() == lora_s.size());
    for (int k = 0; k < steps; k++) {
        CAPTURE(k);
        const std::vector<float> lat = uniform(sa->latent_numel(), 1 + uint32_t(k)), ctx = uniform(sa->context_numel(), 2);
        const std::vector<float> wide = uniform(sb->latent_numel(), 4 + uint32_t(k));
        // A step in the square bucket, then an evaluation and a step in the wide one on what it
        // left (unshared: the LoRA and optimizer state copied over, and back).
        if (k > 0) copy_trained_by_name(*ub, vb->g, *ua, va->g);
        CHECK(ta.step(lat, ctx).loss == uta.step(lat, ctx).loss);
        copy_trained_by_name(*ua, va->g, *ub, vb->g);
        CHECK(tb.evaluate(wide, ctx, 9).loss == utb.evaluate(wide, ctx, 9).loss);
        CHECK(tb.step(wide, ctx).loss == utb.step(wide, ctx).loss);
        for (size_t i = 0; i < lora_a.size(); i++)
            CHECK(ra->read_f32(sa->net->parameters()[i]) == ub->read_f32(vb->net->parameters()[i]));

        // The sampler's UNet on the trained LoRA.
        for (size_t i = 0; i < lora_s.size(); i++) {
            CHECK(rs->read_f32(lora_s[i]) == ub->read_f32(vb->net->parameters()[i]));
            us->write_f32(lora_s[i], ub->read_f32(vb->net->parameters()[i]));
        }
        for (Runtime* r : {rs.get(), us.get()}) {
            r->write_f32(xs, uniform(kSide * kSide * 4, 6));
            r->write_f32(ts, {500.0f});
            r->write_f32(cs, ctx);
            r->run();
        }
        CHECK(rs->read_f32(pred) == us->read_f32(pred));
    }
}

}  // namespace shared_test
