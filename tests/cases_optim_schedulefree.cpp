// Schedule-free op cases. Each case runs one group's whole step over two params (step, step, advance)
// from mid-training state; the reference is schedulefree 1.4's step() written out in double.
#include <algorithm>
#include <cmath>

#include "op_cases.h"

namespace gltest {
namespace {

using namespace gl;

struct SfCase {
    bool gstat = false, zero_lr = false;
    float skip = 0.0f, step = 7.0f;
    ScheduleFreeOptions o;
};

constexpr int64_t kN0 = 5000, kN1 = 37;

// Leaf order (build_sf): hyper, sfstate, [gstat], then per param: p, g, z, [v].
std::vector<std::vector<float>> sf_reference(const SfCase& k, const std::vector<std::vector<float>>& in) {
    const auto& h = in[0];
    std::vector<float> sf = in[1];
    size_t at = k.gstat ? 3 : 2;
    struct P { std::vector<float> p, g, z, v; };
    std::vector<P> qs(2);
    for (auto& q : qs) {
        q.p = in[at++];
        q.g = in[at++];
        q.z = in[at++];
        if (k.o.adam) q.v = in[at++];
    }
    auto outputs = [&] {
        std::vector<std::vector<float>> r = {sf};
        for (auto& q : qs) {
            r.push_back(q.p);
            r.push_back(q.z);
            if (k.o.adam) r.push_back(q.v);
        }
        return r;
    };
    if (k.gstat && in[2][1] != 0.0f) return outputs();
    const double mul = k.gstat ? in[2][0] : 1.0;
    const double b1 = h[1], b2 = h[2], eps = h[3], wd = h[4], t = h[5], gs = h[6] * mul;
    const double kk = t - 1, sched = kk < k.o.warmup_steps ? (kk + 1) / k.o.warmup_steps : 1.0;
    const double lr = h[0] * sched, lr_max = std::max(lr, double(sf[2]));
    const double weight = std::pow(kk + 1, double(k.o.r)) * std::pow(lr_max, double(k.o.weight_lr_power));
    const double wsum = double(sf[0]) + double(sf[1]) + weight, ckp1 = wsum == 0 ? 0.0 : weight / wsum;
    const double bc2 = 1 - std::pow(b2, t);
    for (auto& q : qs)
        for (size_t i = 0; i < q.p.size(); i++) {
            double gi = q.g[i] * gs;
            if (k.o.adam) {
                const double v = b2 * q.v[i] + (1 - b2) * gi * gi;
                q.v[i] = float(v);
                gi = gi / (std::sqrt(v / bc2) + eps);
            }
            gi += wd * q.p[i];
            const double y = q.p[i] + ckp1 * (double(q.z[i]) - q.p[i]);
            q.p[i] = float(y + lr * (b1 * (1 - ckp1) - 1) * gi);
            q.z[i] = float(q.z[i] - lr * gi);
        }
    sf = {float(wsum), float(wsum - double(float(wsum))), float(lr_max), float(ckp1)};
    return outputs();
}

void build_sf(CaseBuilder& b, const SfCase& k) {
    ValueId h = b.c("hyper", {kHyperSize});
    b.set(h, {k.zero_lr ? 0.0f : 2e-2f, 0.9f, 0.999f, 1e-8f, 0.05f, k.step, 0.5f, 0.0f});
    ValueId sf = b.c("sfstate", {kSfStateSize});
    b.set(sf, {k.zero_lr ? 0.0f : 2.4e-3f, 0.0f, k.zero_lr ? -1.0f : 2e-2f, 0.0f});
    ValueId gs = kNoValue;
    if (k.gstat) {
        gs = b.c("gstat", {kGstatSize});
        b.set(gs, {0.5f, k.skip, 1.0f, 1.0f});
    }
    struct Q { ValueId p, g, z, v = kNoValue; };
    std::vector<Q> qs;
    for (int64_t n : {kN0, kN1}) {
        Q q;
        q.p = b.c("p", {n}, -0.2f, 0.2f);
        q.g = b.c("g", {n}, -0.02f, 0.02f);
        q.z = b.c("z", {n}, -0.3f, 0.3f);
        if (k.o.adam) q.v = b.c("v", {n}, 1e-6f, 1e-4f);
        qs.push_back(q);
    }
    for (const Q& q : qs) schedulefree_step(b.g, q.p, q.g, q.z, q.v, h, sf, k.o, gs);
    schedulefree_advance(b.g, sf, h, k.o, gs);
    b.out(sf);
    for (const Q& q : qs) {
        b.out(q.p);
        b.out(q.z);
        if (k.o.adam) b.out(q.v);
    }
}

OpCase sf_case(const char* op, const std::string& label, SfCase k, std::function<void(Graph&)> bad, double tol = 1e-5) {
    return {op, label, [k](CaseBuilder& b) { build_sf(b, k); }, std::move(bad),
            [k](const std::vector<std::vector<float>>& in) { return sf_reference(k, in); }, tol};
}

SfCase variant(int which) {
    SfCase k;
    if (which == 1) {  // SGD, in warm-up, polynomial weighting, gstat multiplier
        k.o.adam = false;
        k.o.warmup_steps = 10;
        k.o.r = 0.5f;
        k.o.weight_lr_power = 1.0f;
        k.gstat = true;
    } else if (which == 2) {  // a group at lr 0 at its first step: the weight sum stays 0, ckp1 = 0
        k.zero_lr = true;
        k.step = 1.0f;
    } else if (which == 3) {
        k.gstat = true;
        k.skip = 1.0f;
    }
    return k;
}

Register r({
    sf_case("schedulefree_step", "AdamW, whole group step", variant(0),
            [](Graph& g) {  // AdamW without v
                ScheduleFreeOptions o;
                schedulefree_step(g, g.param("p", DType::f32, {8}), g.input("g", DType::f32, {8}),
                                  g.state("z", DType::f32, {8}), kNoValue, g.input("h", DType::f32, {8}),
                                  g.state("sf", DType::f32, {4}), o);
            }),
    sf_case("schedulefree_advance", "SGD in warm-up, r 0.5, weight_lr_power 1, gstat multiplier", variant(1),
            [](Graph& g) {  // sfstate of the wrong size
                schedulefree_advance(g, g.state("sf", DType::f32, {3}), g.input("h", DType::f32, {8}),
                                     ScheduleFreeOptions{});
            }),
    sf_case("schedulefree_step", "a group at lr 0 (weight sum 0: ckp1 0)", variant(2),
            [](Graph& g) {  // z of another size
                ScheduleFreeOptions o;
                o.adam = false;
                schedulefree_step(g, g.param("p", DType::f32, {8}), g.input("g", DType::f32, {8}),
                                  g.state("z", DType::f32, {7}), kNoValue, g.input("h", DType::f32, {8}),
                                  g.state("sf", DType::f32, {4}), o);
            }),
    sf_case("schedulefree_step", "gstat non-finite flag: nothing changes", variant(3),
            [](Graph& g) {  // a negative warm-up
                ScheduleFreeOptions o;
                o.adam = false;
                o.warmup_steps = -1.0f;
                schedulefree_step(g, g.param("p", DType::f32, {8}), g.input("g", DType::f32, {8}),
                                  g.state("z", DType::f32, {8}), kNoValue, g.input("h", DType::f32, {8}),
                                  g.state("sf", DType::f32, {4}), o);
            },
            0.0),
});

}  // namespace
}  // namespace gltest
