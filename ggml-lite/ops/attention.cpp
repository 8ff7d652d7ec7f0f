// Scaled dot-product attention, flash style: the forward streams key blocks through an
// online softmax and saves only the log-sum-exp of each query row; the backward recomputes
// P = exp(s - lse) one block at a time from it and D = rowsum(dO * O). No L x S score matrix
// exists beyond one kBlockQ x kBlockK tile.
// Layouts: q [B, L, H, d], k [B, S, H, d], v [B, S, H, dv], o [B, L, H, dv], lse [B, H, L] f32.
// Causal (CLIP) masks keys j > i and needs L == S.
// Determinism: every row's reduction runs over key blocks in a fixed order, and dK/dV
// (reduced over queries) and dQ (reduced over keys) are computed in two separate passes,
// each output element owned by one task, so results never depend on the thread count.
#include "ggml-lite/ops/family.h"

namespace gl {

namespace {

constexpr int64_t kBlockQ = 16;  // query rows per tile
constexpr int64_t kBlockK = 32;  // keys per tile

struct AttnDims {
    int64_t B, L, S, H, d, dv;
};

AttnDims attn_dims(const Shape& q, const Shape& k, const Shape& v) {
    return {q[0], q[1], k[1], q[2], q[3], v[3]};
}

// Scale 0 stands for 1/sqrt(d).
double attn_scale(const Params& p, int64_t d) {
    return p.f[0] != 0.0f ? double(p.f[0]) : 1.0 / std::sqrt(double(d));
}

// Validates q, k, v (inputs 0, 1, 2) and the causal flag.
void check_qkv(const OpCall& c) {
    const Shape &q = c.shape(0), &k = c.shape(1), &v = c.shape(2);
    c.check(q.nd == 4 && k.nd == 4 && v.nd == 4, "q, k, v must be [B, L, H, d], [B, S, H, d], [B, S, H, dv]");
    c.check(dtype_is_float(c.dtype(0)), "q, k, v must be floating point");
    c.check(c.dtype(1) == c.dtype(0) && c.dtype(2) == c.dtype(0), "q, k, v must share a dtype");
    c.check(k[0] == q[0] && v[0] == q[0], "batch sizes of q, k, v differ");
    c.check(k[2] == q[2] && v[2] == q[2], "head counts of q, k, v differ");
    c.check(k[3] == q[3], "q and k head dims differ (", q[3], " vs ", k[3], ")");
    c.check(v[1] == k[1], "k and v lengths differ (", k[1], " vs ", v[1], ")");
    c.check(q.numel() > 0 && k.numel() > 0 && v.numel() > 0, "q, k, v must not be empty");
    c.check(c.p.i[0] == 0 || q[1] == k[1], "causal attention needs L == S, got L ", q[1], ", S ", k[1]);
    c.check(std::isfinite(c.p.f[0]), "scale must be finite");
}

// Score pairs actually computed (the causal mask drops about half).
double attn_pairs(const AttnDims& D, bool causal) {
    double pairs = double(D.L) * double(D.S);
    if (causal) pairs = double(D.L) * double(D.L + 1) / 2.0;
    return double(D.B * D.H) * pairs;
}

// Four interleaved partial sums (a fixed order, so still deterministic) let the compiler
// vectorise what would otherwise be one serial chain of double adds.
double dot(const float* a, const float* b, int64_t n) {
    double s[4] = {0, 0, 0, 0};
    int64_t t = 0;
    for (; t + 4 <= n; t += 4)
        for (int u = 0; u < 4; u++) s[u] += double(a[t + u]) * double(b[t + u]);
    for (; t < n; t++) s[0] += double(a[t]) * double(b[t]);
    return (s[0] + s[1]) + (s[2] + s[3]);
}

// Fills the tile s[r][c] = scale * q_{i0+r} . k_{j0+c} (masked: -inf) for one (b, h).
// qh and kh point at row 0 of the head; rows are `rs` floats apart.
void score_tile(double* s, const float* qh, const float* kh, int64_t rs, int64_t d, int64_t i0, int64_t nq,
                int64_t j0, int64_t nk, double scale, bool causal) {
    for (int64_t r = 0; r < nq; r++)
        for (int64_t c = 0; c < nk; c++) {
            const int64_t i = i0 + r, j = j0 + c;
            s[r * kBlockK + c] = causal && j > i ? -INFINITY : scale * dot(qh + i * rs, kh + j * rs, d);
        }
}

}  // namespace

// ---------------- attention: p.i[0] causal (0/1), p.f[0] scale (0 = 1/sqrt(d)) ----------------
// inputs (q, k, v); outputs {o [B, L, H, dv] (q's dtype), lse [B, H, L] f32}

static std::vector<OutSpec> attention_infer(const OpCall& c) {
    c.check(c.n_in() == 3, "takes (q, k, v)");
    check_qkv(c);
    const AttnDims D = attn_dims(c.shape(0), c.shape(1), c.shape(2));
    return {dense(c.dtype(0), Shape{D.B, D.L, D.H, D.dv}), dense(DType::f32, Shape{D.B, D.H, D.L})};
}
static Cost attention_cost(const OpCall& c) {
    const AttnDims D = attn_dims(c.shape(0), c.shape(1), c.shape(2));
    double out = double(D.B * D.L * D.H * D.dv) * double(dtype_size(c.dtype(0))) + 4.0 * double(D.B * D.H * D.L);
    return {2.0 * attn_pairs(D, c.p.i[0] != 0) * double(D.d + D.dv), call_bytes_all_in(c) + out};
}

static void attention_cpu(CpuCtx& c) {
    const AttnDims D = attn_dims(c.in_shape(0), c.in_shape(1), c.in_shape(2));
    const bool causal = c.p().i[0] != 0;
    const double scale = attn_scale(c.p(), D.d);
    const float* q = c.in_f32(0);
    const float* k = c.in_f32(1);
    const float* v = c.in_f32(2);
    float* o = c.out_f32(0);
    float* lse = c.out_f32(1);
    const int64_t nqb = (D.L + kBlockQ - 1) / kBlockQ;
    const int64_t qrs = D.H * D.d, vrs = D.H * D.dv;  // floats between consecutive rows of one head
    parallel_for(D.B * D.H * nqb, 1, [&](int64_t t0, int64_t t1) {
        std::vector<double> s(size_t(kBlockQ * kBlockK)), acc(size_t(kBlockQ * D.dv)), m(kBlockQ), l(kBlockQ);
        for (int64_t t = t0; t < t1; t++) {
            const int64_t bh = t / nqb, b = bh / D.H, h = bh % D.H;
            const int64_t i0 = (t % nqb) * kBlockQ, nq = std::min(kBlockQ, D.L - i0);
            const float* qh = q + b * D.L * qrs + h * D.d;
            const float* kh = k + b * D.S * qrs + h * D.d;
            const float* vh = v + b * D.S * vrs + h * D.dv;
            std::fill(m.begin(), m.end(), -INFINITY);
            std::fill(l.begin(), l.end(), 0.0);
            std::fill(acc.begin(), acc.end(), 0.0);
            const int64_t s_end = causal ? i0 + nq : D.S;  // later keys are masked for every row
            for (int64_t j0 = 0; j0 < s_end; j0 += kBlockK) {
                const int64_t nk = std::min(kBlockK, s_end - j0);
                score_tile(s.data(), qh, kh, qrs, D.d, i0, nq, j0, nk, scale, causal);
                for (int64_t r = 0; r < nq; r++) {
                    const double* sr = s.data() + r * kBlockK;
                    double mb = m[size_t(r)];
                    for (int64_t cc = 0; cc < nk; cc++) mb = std::max(mb, sr[cc]);
                    if (mb == -INFINITY) continue;  // this row sees no key yet
                    double* ar = acc.data() + r * D.dv;
                    const double corr = std::exp(m[size_t(r)] - mb);  // rescales what earlier blocks summed
                    if (corr != 1.0) {
                        l[size_t(r)] *= corr;
                        for (int64_t e = 0; e < D.dv; e++) ar[e] *= corr;
                    }
                    for (int64_t cc = 0; cc < nk; cc++) {
                        if (sr[cc] == -INFINITY) continue;
                        const double pr = std::exp(sr[cc] - mb);
                        l[size_t(r)] += pr;
                        const float* vj = vh + (j0 + cc) * vrs;
                        for (int64_t e = 0; e < D.dv; e++) ar[e] += pr * vj[e];
                    }
                    m[size_t(r)] = mb;
                }
            }
            for (int64_t r = 0; r < nq; r++) {
                const int64_t i = i0 + r;
                const double inv = 1.0 / l[size_t(r)];
                float* orow = o + ((b * D.L + i) * D.H + h) * D.dv;
                for (int64_t e = 0; e < D.dv; e++) orow[e] = float(acc[size_t(r * D.dv + e)] * inv);
                lse[(b * D.H + h) * D.L + i] = float(m[size_t(r)] + std::log(l[size_t(r)]));
            }
        }
    });
}

static void attention_backward(BackwardCtx& b) {
    if (b.grad(0) == kNoValue) return;  // lse is a saved statistic, not a differentiable output
    auto r = b.g.apply(Op::attention_grad, {b.in(0), b.in(1), b.in(2), b.out(0), b.out(1), b.grad(0)}, b.p());
    b.add(0, r[0]);
    b.add(1, r[1]);
    b.add(2, r[2]);
}

ValueId attention(Graph& g, ValueId q, ValueId k, ValueId v, float scale, bool causal) {
    Params p;
    p.i[0] = causal ? 1 : 0;
    p.f[0] = scale;
    return g.apply(Op::attention, {q, k, v}, p)[0];
}

const OpDef def_attention{"attention", "attention", attention_infer, attention_cost, attention_backward,
                          attention_cpu, 0};

// ---------------- attention_grad: params as attention ----------------
// inputs (q, k, v, o, lse, go); outputs {dq, dk, dv} shaped and typed like q, k, v.

static std::vector<OutSpec> attention_grad_infer(const OpCall& c) {
    c.check(c.n_in() == 6, "takes (q, k, v, o, lse, go)");
    check_qkv(c);
    const AttnDims D = attn_dims(c.shape(0), c.shape(1), c.shape(2));
    const Shape os{D.B, D.L, D.H, D.dv};
    c.check(c.shape(3) == os && dtype_is_float(c.dtype(3)), "o must be ", os);
    c.check(c.shape(4) == Shape({D.B, D.H, D.L}) && c.dtype(4) == DType::f32, "lse must be f32 [B, H, L]");
    c.check(c.shape(5) == os && dtype_is_float(c.dtype(5)), "go must be ", os);
    return {dense(c.dtype(0), c.shape(0)), dense(c.dtype(1), c.shape(1)), dense(c.dtype(2), c.shape(2))};
}
static Cost attention_grad_cost(const OpCall& c) {
    // The usual flash backward: S = QK^T, dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q.
    const AttnDims D = attn_dims(c.shape(0), c.shape(1), c.shape(2));
    double flops = 2.0 * attn_pairs(D, c.p.i[0] != 0) * double(3 * D.d + 2 * D.dv);
    return {flops, call_bytes_all_in(c) + call_bytes_in(c, 0) + call_bytes_in(c, 1) + call_bytes_in(c, 2)};
}

static void attention_grad_cpu(CpuCtx& c) {
    const AttnDims D = attn_dims(c.in_shape(0), c.in_shape(1), c.in_shape(2));
    const bool causal = c.p().i[0] != 0;
    const double scale = attn_scale(c.p(), D.d);
    const float* q = c.in_f32(0);
    const float* k = c.in_f32(1);
    const float* v = c.in_f32(2);
    const float* o = c.in_f32(3);
    const float* lse = c.in_f32(4);
    const float* go = c.in_f32(5);
    float* dq = c.out_f32(0);
    float* dk = c.out_f32(1);
    float* dv = c.out_f32(2);
    const int64_t qrs = D.H * D.d, vrs = D.H * D.dv;

    // D_i = dO_i . O_i, laid out like lse.
    std::vector<double> Drow(size_t(D.B * D.H * D.L));
    parallel_for(D.B * D.H, 1, [&](int64_t t0, int64_t t1) {
        for (int64_t bh = t0; bh < t1; bh++) {
            const int64_t b = bh / D.H, h = bh % D.H;
            for (int64_t i = 0; i < D.L; i++) {
                const int64_t at = ((b * D.L + i) * D.H + h) * D.dv;
                Drow[size_t(bh * D.L + i)] = dot(go + at, o + at, D.dv);
            }
        }
    });

    // One tile of P and dS = P * (dO V^T - D) for rows [i0, i0+nq) and keys [j0, j0+nk).
    auto tile = [&](double* p, double* ds, int64_t b, int64_t h, int64_t i0, int64_t nq, int64_t j0, int64_t nk) {
        const int64_t bh = b * D.H + h;
        const float* qh = q + b * D.L * qrs + h * D.d;
        const float* kh = k + b * D.S * qrs + h * D.d;
        const float* vh = v + b * D.S * vrs + h * D.dv;
        const float* goh = go + b * D.L * vrs + h * D.dv;
        score_tile(p, qh, kh, qrs, D.d, i0, nq, j0, nk, scale, causal);
        for (int64_t r = 0; r < nq; r++) {
            const int64_t i = i0 + r;
            const double li = lse[bh * D.L + i], Di = Drow[size_t(bh * D.L + i)];
            for (int64_t cc = 0; cc < nk; cc++) {
                double& pr = p[r * kBlockK + cc];
                pr = pr == -INFINITY ? 0.0 : std::exp(pr - li);
                ds[r * kBlockK + cc] = pr == 0.0 ? 0.0 : pr * (dot(goh + i * vrs, vh + (j0 + cc) * vrs, D.dv) - Di);
            }
        }
    };

    // Pass 1: dK and dV, one task per (b, h, key block), summing over query blocks in order.
    const int64_t nkb = (D.S + kBlockK - 1) / kBlockK;
    parallel_for(D.B * D.H * nkb, 1, [&](int64_t t0, int64_t t1) {
        std::vector<double> p(size_t(kBlockQ * kBlockK)), ds(p.size());
        std::vector<double> ak(size_t(kBlockK * D.d)), av(size_t(kBlockK * D.dv));
        for (int64_t t = t0; t < t1; t++) {
            const int64_t bh = t / nkb, b = bh / D.H, h = bh % D.H;
            const int64_t j0 = (t % nkb) * kBlockK, nk = std::min(kBlockK, D.S - j0);
            const float* qh = q + b * D.L * qrs + h * D.d;
            const float* goh = go + b * D.L * vrs + h * D.dv;
            std::fill(ak.begin(), ak.end(), 0.0);
            std::fill(av.begin(), av.end(), 0.0);
            // Rows before j0 see none of these keys under the causal mask.
            for (int64_t i0 = causal ? j0 / kBlockQ * kBlockQ : 0; i0 < D.L; i0 += kBlockQ) {
                const int64_t nq = std::min(kBlockQ, D.L - i0);
                tile(p.data(), ds.data(), b, h, i0, nq, j0, nk);
                for (int64_t r = 0; r < nq; r++) {
                    const float* qi = qh + (i0 + r) * qrs;
                    const float* gi = goh + (i0 + r) * vrs;
                    for (int64_t cc = 0; cc < nk; cc++) {
                        const double pr = p[size_t(r * kBlockK + cc)], dsr = ds[size_t(r * kBlockK + cc)];
                        if (pr == 0.0) continue;
                        double* avj = av.data() + cc * D.dv;
                        double* akj = ak.data() + cc * D.d;
                        for (int64_t e = 0; e < D.dv; e++) avj[e] += pr * gi[e];
                        for (int64_t e = 0; e < D.d; e++) akj[e] += dsr * qi[e];
                    }
                }
            }
            for (int64_t cc = 0; cc < nk; cc++) {
                float* dkj = dk + ((b * D.S + j0 + cc) * D.H + h) * D.d;
                float* dvj = dv + ((b * D.S + j0 + cc) * D.H + h) * D.dv;
                for (int64_t e = 0; e < D.d; e++) dkj[e] = float(scale * ak[size_t(cc * D.d + e)]);
                for (int64_t e = 0; e < D.dv; e++) dvj[e] = float(av[size_t(cc * D.dv + e)]);
            }
        }
    });

    // Pass 2: dQ, one task per (b, h, query block), summing over key blocks in order.
    const int64_t nqb = (D.L + kBlockQ - 1) / kBlockQ;
    parallel_for(D.B * D.H * nqb, 1, [&](int64_t t0, int64_t t1) {
        std::vector<double> p(size_t(kBlockQ * kBlockK)), ds(p.size()), aq(size_t(kBlockQ * D.d));
        for (int64_t t = t0; t < t1; t++) {
            const int64_t bh = t / nqb, b = bh / D.H, h = bh % D.H;
            const int64_t i0 = (t % nqb) * kBlockQ, nq = std::min(kBlockQ, D.L - i0);
            const float* kh = k + b * D.S * qrs + h * D.d;
            std::fill(aq.begin(), aq.end(), 0.0);
            const int64_t s_end = causal ? i0 + nq : D.S;
            for (int64_t j0 = 0; j0 < s_end; j0 += kBlockK) {
                const int64_t nk = std::min(kBlockK, s_end - j0);
                tile(p.data(), ds.data(), b, h, i0, nq, j0, nk);
                for (int64_t r = 0; r < nq; r++) {
                    double* aqi = aq.data() + r * D.d;
                    for (int64_t cc = 0; cc < nk; cc++) {
                        const double dsr = ds[size_t(r * kBlockK + cc)];
                        if (dsr == 0.0) continue;
                        const float* kj = kh + (j0 + cc) * qrs;
                        for (int64_t e = 0; e < D.d; e++) aqi[e] += dsr * kj[e];
                    }
                }
            }
            for (int64_t r = 0; r < nq; r++) {
                float* dqi = dq + ((b * D.L + i0 + r) * D.H + h) * D.d;
                for (int64_t e = 0; e < D.d; e++) dqi[e] = float(scale * aq[size_t(r * D.d + e)]);
            }
        }
    });
}

const OpDef def_attention_grad{"attention_grad", "attention", attention_grad_infer, attention_grad_cost, nullptr,
                               attention_grad_cpu, kOpGradHelper};

}  // namespace gl
