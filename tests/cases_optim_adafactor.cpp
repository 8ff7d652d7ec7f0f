// Adafactor op cases: the reference is transformers' Adafactor.step written out with loops, in
// double (PyTorch's factoring of the shape it sees: a conv weight here [Cout, kh, kw, Cin] is
// indexed as PyTorch's [Cout, Cin, kh, kw]).
#include <algorithm>
#include <cmath>

#include "op_cases.h"

namespace gltest {
namespace {

using namespace gl;

struct AfCase {
    Shape shape;
    bool conv = false, has_m = false, gstat = false;
    float skip = 0.0f;
    AdafactorOptions o;
};

// in: param, grad, [m], v_row (or v), [v_col], hyper, [gstat] (leaf order of build_af)
std::vector<std::vector<float>> af_reference(const AfCase& k, const std::vector<std::vector<float>>& in) {
    size_t at = 0;
    std::vector<float> p = in[at++];
    const std::vector<float>& g = in[at++];
    std::vector<float> m = k.has_m ? in[at++] : std::vector<float>{};
    std::vector<float> vr = in[at++];
    const bool factored = k.shape.nd >= 2;
    std::vector<float> vc = factored ? in[at++] : std::vector<float>{};
    const auto& h = in[at++];
    double mul = k.gstat ? in[at][0] : 1.0;
    std::vector<std::vector<float>> unchanged = {p};
    if (k.has_m) unchanged.push_back(m);
    unchanged.push_back(vr);
    if (factored) unchanged.push_back(vc);
    if (k.gstat && in[at][1] != 0.0f) return unchanged;

    const double lr_h = h[0], b1 = h[1], eps1 = h[3], wd = h[4], t = h[5], gs = h[6] * mul;
    const size_t n = p.size();
    double pp = 0;
    for (float x : p) pp += double(x) * x;
    double rel = lr_h;
    if (k.o.relative_step) rel = std::min(k.o.warmup_init ? 1e-6 * t : 1e-2, 1.0 / std::sqrt(t));
    double scale = k.o.scale_parameter ? std::max(double(k.o.eps2), std::sqrt(pp / double(n))) : 1.0;
    double lr = scale * rel, beta2t = 1.0 - std::pow(t, double(k.o.decay_rate));
    std::vector<double> u(n);
    if (factored) {
        // PyTorch's view [B, R, C]: for a conv weight (O, kh, kw, I) in memory, B = (O, I), R = kh, C = kw.
        int64_t O = k.shape.d[0], R = k.shape.d[size_t(k.shape.nd - 2)], C = k.shape.d[size_t(k.shape.nd - 1)], I = 1;
        if (k.conv) R = k.shape.d[1], C = k.shape.d[2], I = k.shape.d[3];
        else if (k.shape.nd == 2) O = 1;
        auto idx = [&](int64_t b, int64_t r, int64_t c) { return size_t(((b / I * R + r) * C + c) * I + b % I); };
        for (int64_t b = 0; b < O * I; b++) {
            std::vector<double> row(static_cast<size_t>(R)), col(static_cast<size_t>(C));
            for (int64_t r = 0; r < R; r++)
                for (int64_t c = 0; c < C; c++) {
                    double x = g[idx(b, r, c)] * gs, e = x * x + eps1;
                    row[size_t(r)] += e / double(C);
                    col[size_t(c)] += e / double(R);
                }
            double rmean = 0;
            for (int64_t r = 0; r < R; r++) {
                double& v = row[size_t(r)];
                v = beta2t * vr[size_t(b * R + r)] + (1 - beta2t) * v;
                vr[size_t(b * R + r)] = float(v);
                rmean += v / double(R);
            }
            for (int64_t c = 0; c < C; c++) {
                col[size_t(c)] = beta2t * vc[size_t(b * C + c)] + (1 - beta2t) * col[size_t(c)];
                vc[size_t(b * C + c)] = float(col[size_t(c)]);
            }
            for (int64_t r = 0; r < R; r++)
                for (int64_t c = 0; c < C; c++)
                    u[idx(b, r, c)] = g[idx(b, r, c)] * gs / std::sqrt(row[size_t(r)] / rmean) / std::sqrt(col[size_t(c)]);
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            double x = g[i] * gs, v = beta2t * vr[i] + (1 - beta2t) * (x * x + eps1);
            vr[i] = float(v);
            u[i] = x / std::sqrt(v);
        }
    }
    double uu = 0;
    for (double x : u) uu += x * x;
    double denom = std::max(1.0, std::sqrt(uu / double(n)) / double(k.o.clip_threshold));
    for (size_t i = 0; i < n; i++) {
        double ui = u[i] / denom * lr;
        if (k.has_m) {
            ui = b1 * m[i] + (1 - b1) * ui;
            m[i] = float(ui);
        }
        double pi = p[i];
        pi -= wd * lr * pi;
        p[i] = float(pi - ui);
    }
    std::vector<std::vector<float>> out = {p};
    if (k.has_m) out.push_back(m);
    out.push_back(vr);
    if (factored) out.push_back(vc);
    return out;
}

void build_af(CaseBuilder& b, const AfCase& k) {
    ValueId p = b.c("param", k.shape);
    ValueId g = b.c("grad", k.shape, -0.02f, 0.02f);
    ValueId m = k.has_m ? b.c("m", k.shape, -0.01f, 0.01f) : kNoValue;
    auto [rows, cols] = adafactor_state_sizes(k.shape);
    ValueId vr = b.c("v_row", {rows}, 1e-5f, 1e-4f);
    ValueId vc = cols ? b.c("v_col", {cols}, 1e-5f, 1e-4f) : kNoValue;
    ValueId h = b.c("hyper", {kHyperSize});
    b.set(h, {1e-2f, 0.9f, 0.0f, 1e-30f, 0.05f, 7.0f, 0.5f, 0.0f});
    ValueId gs = kNoValue;
    if (k.gstat) {
        gs = b.c("gstat", {kGstatSize});
        b.set(gs, {0.5f, k.skip, 1.0f, 1.0f});
    }
    adafactor_step(b.g, p, g, m, vr, vc, h, k.o, gs);
    for (ValueId x : {p, m, vr, vc})
        if (x != kNoValue) b.out(x);
}

OpCase af_case(const std::string& label, AfCase k, double tol = 1e-5) {
    return {"adafactor_step", label, [k](CaseBuilder& b) { build_af(b, k); },
            [](Graph& g) {  // a 2-D param given one full v
                ValueId p = g.param("p", DType::f32, {4, 6});
                adafactor_step(g, p, g.input("g", DType::f32, {4, 6}), kNoValue, g.state("v", DType::f32, {24}),
                               kNoValue, g.input("h", DType::f32, {8}), AdafactorOptions{});
            },
            [k](const std::vector<std::vector<float>>& in) { return af_reference(k, in); }, tol};
}

AfCase make(Shape s, bool conv, bool has_m, bool rel, bool scale, bool warm) {
    AfCase k;
    k.shape = s;
    k.conv = conv;
    k.has_m = has_m;
    k.o.relative_step = rel;
    k.o.scale_parameter = scale;
    k.o.warmup_init = warm;
    return k;
}

AfCase with_gstat(AfCase k, float skip) {
    k.gstat = true;
    k.skip = skip;
    return k;
}

Register r({
    af_case("2-D factored over 4096 elements, relative step, scaled, first moment",
            make(Shape{40, 130}, false, true, true, true, false)),
    af_case("3-D batch of factored matrices, fixed lr, no first moment, clipped update",
            make(Shape{3, 5, 7}, false, false, false, false, false)),
    af_case("conv weight [Cout, kh, kw, Cin] factored as PyTorch's [Cout, Cin, kh, kw], gstat multiplier",
            with_gstat(make(Shape{4, 3, 2, 5}, true, true, false, true, false), 0.0f)),
    af_case("1-D unfactored, warmup_init", make(Shape{300}, false, false, true, true, true)),
    af_case("gstat non-finite flag: nothing changes", with_gstat(make(Shape{6, 9}, false, true, true, true, false), 1.0f),
            0.0),
});

}  // namespace
}  // namespace gltest
