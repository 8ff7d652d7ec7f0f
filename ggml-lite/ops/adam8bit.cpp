// Block-wise 8-bit AdamW, Lion and SGD with momentum (Dettmers et al. 2021, as bitsandbytes) as in-place ops: the two
// dynamic quantisation maps, the nearest-code search and the CPU reference steps.
#include <algorithm>
#include <bit>

#include "ggml-lite/ops/adam8bit_codes.h"
#include "ggml-lite/ops/optim_common.h"

namespace gl {

// ---------------- the 8-bit dynamic maps ----------------
// Dettmers' dynamic tree code with 7 exponent bits: for exponent i in 0..6 the fraction grid
// linspace(0.1, 1, F) (F = 2^i + 1 signed, 2^(i+1) + 1 unsigned) gives the midpoints of adjacent
// boundaries, scaled by 10^(i-6) (and negated too when signed); then 0 and 1.0; sorted.

static std::vector<float> make_dynamic_map(bool is_signed) {
    std::vector<float> q;
    for (int i = 0; i < 7; i++) {
        int items = is_signed ? (1 << i) + 1 : (1 << (i + 1)) + 1;
        std::vector<float> bounds(static_cast<size_t>(items));
        for (int k = 0; k < items; k++) bounds[size_t(k)] = float(0.1 + 0.9 * double(k) / double(items - 1));
        for (int k = 0; k + 1 < items; k++) {
            float mean = (bounds[size_t(k)] + bounds[size_t(k + 1)]) / 2.0f;
            float scaled = float(std::pow(10.0, double(i - 6))) * mean;
            q.push_back(scaled);
            if (is_signed) q.push_back(-scaled);
        }
    }
    q.push_back(0.0f);
    q.push_back(1.0f);
    GL_CHECK(q.size() == 256, "adam8bit: dynamic map has ", q.size(), " entries");
    std::sort(q.begin(), q.end());
    return q;
}

const float* adam8bit_qmap(bool is_signed) {
    static const std::vector<float> s = make_dynamic_map(true), u = make_dynamic_map(false);
    return is_signed ? s.data() : u.data();
}

int adam8bit_quantize(const float* q, float x) {
    int lo = 0, hi = 255;  // q[lo] <= x <= q[hi] after clamping
    if (!(x > q[0])) return 0;
    if (!(x < q[255])) return 255;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (q[mid] <= x) lo = mid; else hi = mid;
    }
    return (x - q[lo] <= q[hi] - x) ? lo : hi;
}

// ---- the O(1) search tables (ops/adam8bit_codes.h says why they are exact) ----

namespace {

// An integer key that orders floats like their values (-0 just below +0); NaN excluded.
int64_t float_order(float x) {
    uint32_t b = adam8bit_float_bits(x);
    return (b >> 31) ? -int64_t(b & 0x7fffffffu) - 1 : int64_t(b);
}
float float_from_order(int64_t k) {
    return std::bit_cast<float>(k >= 0 ? uint32_t(k) : (uint32_t(-(k + 1)) | 0x80000000u));
}
float float_from_bits(uint32_t b) {
    return std::bit_cast<float>(b);
}

// s_j: the last float x in [q[j], q[j+1]) for which the search still picks j.
std::vector<float> code_thresholds(const float* q) {
    std::vector<float> s;
    for (int j = 0; j < 255; j++) {
        const float a = q[j], b = q[j + 1];
        int64_t lo = float_order(a), hi = float_order(b);  // picks j at lo, not at hi
        while (hi - lo > 1) {
            int64_t mid = lo + (hi - lo) / 2;
            float x = float_from_order(mid);
            if (x - a <= b - x) lo = mid; else hi = mid;
        }
        s.push_back(float_from_order(lo));
    }
    return s;
}

template <int M>
void fill_buckets(const std::vector<float>& s, bool negative, uint32_t* out) {
    using B = Adam8bitBuckets<M>;
    for (int k = 0; k < B::kCount; k++) {
        const uint32_t first = (uint32_t(k) + B::kFirst) << B::kLowBits;
        const float amin = k == 0 ? 0.0f : float_from_bits(first);
        const float amax = k == B::kCount - 1 ? INFINITY : float_from_bits(first + B::kLowMask);
        const float lo = negative ? -amax : amin, hi = negative ? -amin : amax;
        uint32_t below = 0, inside = 0, low = 0;
        for (float t : s) {
            if (t < lo) below++;
            else if (t <= hi) inside++, low = adam8bit_float_bits(std::fabs(t)) & B::kLowMask;
        }
        // One threshold per bucket at most, and none in the clamped end buckets (whose members
        // do not share their mantissa's top bits).
        GL_CHECK(inside <= 1 && (inside == 0 || (k > 0 && k < B::kCount - 1)), "adam8bit: bucket ", k,
                 " of the code table holds ", inside, " thresholds");
        // Entry format: ops/adam8bit_codes.h (for x < 0 the threshold's low bits are complemented).
        out[k] = below << 24 | (inside ? (negative ? low ^ B::kLowMask : low) : B::kNone);
    }
}

}  // namespace

const uint32_t* adam8bit_code_table(bool is_signed) {
    static const std::vector<uint32_t> signed_table = [] {
        std::vector<uint32_t> t(kAdam8bitSignedEntries);
        std::vector<float> s = code_thresholds(adam8bit_qmap(true));
        fill_buckets<6>(s, false, t.data());
        fill_buckets<6>(s, true, t.data() + Adam8bitSignedBuckets::kCount);
        return t;
    }();
    static const std::vector<uint32_t> unsigned_table = [] {
        std::vector<uint32_t> t(kAdam8bitUnsignedEntries);
        fill_buckets<7>(code_thresholds(adam8bit_qmap(false)), false, t.data());
        return t;
    }();
    return is_signed ? signed_table.data() : unsigned_table.data();
}

void check_blockwise_8bit(const OpCall& c, int n, int n_codes, const char* codes) {
    for (int k = 0; k < n; k++) {
        check_state_f32(c, k, "param");
        check_state_f32(c, n + k, "grad");
        const int64_t e = c.shape(k).numel(), blocks = (e + kAdam8bitBlock - 1) / kAdam8bitBlock;
        c.check(c.shape(n + k).numel() == e, "grad must have the parameter's element count");
        for (int i = 2; i < 2 + n_codes; i++) {
            c.check(c.dtype(i * n + k) == DType::u8, codes, " must be u8 codes");
            c.check(c.shape(i * n + k).numel() == e, codes, " must have the parameter's element count");
        }
        for (int i = 2 + n_codes; i < 2 + 2 * n_codes; i++) {
            check_state_f32(c, i * n + k, "absmax");
            c.check(c.shape(i * n + k).numel() == blocks, "absmax must hold one float per block of ", kAdam8bitBlock,
                    " (", blocks, ")");
        }
    }
}

// ------ adamw8bit_step(params..., grads..., m u8..., v u8..., absmax_m..., absmax_v..., hyper[, gstat]);
// p.i[1] = N: the N tensors of one parameter group in one node, each with its own 256-blocks ------

static std::vector<OutSpec> adamw8bit_infer(const OpCall& c) {
    const int n = multi_count(c, 6);
    check_gstat_input(c, 6 * n + 1);
    check_blockwise_8bit(c, n, 2, "m and v");
    check_hyper_input(c, 6 * n);
    return {};
}

static void adamw8bit_cpu(CpuCtx& c) {
    const int N = int(c.p().i[1]);
    const GradGate gate = grad_gate(c, 6 * N + 1);
    if (gate.skip) return;
    const float* h = c.in_f32(6 * N);
    const float* qs = adam8bit_qmap(true);
    const float* qu = adam8bit_qmap(false);
    const float lr = h[kLr], b1 = h[kBeta1], b2 = h[kBeta2], eps = h[kEps], wd = h[kWeightDecay], gs = h[kGradScale];
    const double t = h[kStep];
    const float corr2 = float(std::sqrt(1.0 - std::pow(double(b2), t)));
    const float step_size = float(-double(lr) * double(corr2) / (1.0 - std::pow(double(b1), t)));
    const float decay = 1.0f - lr * wd;
    for (int tensor = 0; tensor < N; tensor++) {
        const auto at = [&](int kind) { return kind * N + tensor; };
        float* p = mut_f32(c, at(0));
        const float* g = c.in_f32(at(1));
        uint8_t* cm = mut_u8(c, at(2));
        uint8_t* cv = mut_u8(c, at(3));
        float* am = mut_f32(c, at(4));
        float* av = mut_f32(c, at(5));
        const int64_t n = c.in[size_t(at(0))].numel(), blocks = (n + kAdam8bitBlock - 1) / kAdam8bitBlock;
        parallel_for(blocks, 16, [&](int64_t lo, int64_t hi) {
            float m[kAdam8bitBlock], v[kAdam8bitBlock];
            bool ok[kAdam8bitBlock];
            for (int64_t b = lo; b < hi; b++) {
                int64_t base = b * kAdam8bitBlock, len = std::min<int64_t>(kAdam8bitBlock, n - base);
                float new_am = 0.0f, new_av = 0.0f;
                for (int64_t k = 0; k < len; k++) {
                    int64_t i = base + k;
                    float gi = (g[i] * gs) * gate.mul;
                    m[k] = qs[cm[i]] * am[b];
                    v[k] = qu[cv[i]] * av[b];
                    ok[k] = std::isfinite(gi);
                    if (ok[k]) {
                        v[k] = b2 * v[k] + (1.0f - b2) * (gi * gi);
                        m[k] = b1 * m[k] + (1.0f - b1) * gi;
                    }
                    new_am = std::max(new_am, std::fabs(m[k]));
                    new_av = std::max(new_av, v[k]);
                }
                const float inv_am = adam8bit_inverse(new_am), inv_av = adam8bit_inverse(new_av);
                for (int64_t k = 0; k < len; k++) {
                    int64_t i = base + k;
                    if (ok[k]) {
                        float pi = p[i] + step_size * (m[k] / (std::sqrt(v[k]) + corr2 * eps));
                        p[i] = pi * decay;
                    }
                    cm[i] = uint8_t(adam8bit_quantize(qs, adam8bit_normalize(m[k], new_am, inv_am)));
                    cv[i] = uint8_t(adam8bit_quantize(qu, adam8bit_normalize(v[k], new_av, inv_av)));
                }
                am[b] = new_am;
                av[b] = new_av;
            }
        });
    }
}

void adamw8bit_step(Graph& g, const std::vector<ValueId>& params, const std::vector<ValueId>& grads,
                    const std::vector<ValueId>& m, const std::vector<ValueId>& v, const std::vector<ValueId>& absmax_m,
                    const std::vector<ValueId>& absmax_v, ValueId hyper, ValueId gstat) {
    Params p;
    p.i[1] = int64_t(params.size());
    g.apply(Op::adamw8bit_step, multi_inputs({&params, &grads, &m, &v, &absmax_m, &absmax_v}, {hyper, gstat}), p);
}

void adamw8bit_step(Graph& g, ValueId param, ValueId grad, ValueId m, ValueId v, ValueId absmax_m, ValueId absmax_v,
                    ValueId hyper, ValueId gstat) {
    adamw8bit_step(g, std::vector<ValueId>{param}, {grad}, {m}, {v}, {absmax_m}, {absmax_v}, hyper, gstat);
}

// ------ lion8bit_step(params..., grads..., m u8..., absmax_m..., hyper[, gstat]); p.i[1] = N ------
// bitsandbytes' 1-state block-wise kernel for LION: decay, the sign step from the dequantised m, m's
// EMA, the block's new absmax, requantisation, and a code whose value's sign differs from the
// moment's moved one code toward it (so a small negative moment never becomes 0).

static std::vector<OutSpec> lion8bit_infer(const OpCall& c) {
    const int n = multi_count(c, 4);
    check_gstat_input(c, 4 * n + 1);
    check_blockwise_8bit(c, n, 1, "m");
    check_hyper_input(c, 4 * n);
    return {};
}

int lion8bit_code(const float* qs, float m, float absmax, float inverse) {
    int code = adam8bit_quantize(qs, adam8bit_normalize(m, absmax, inverse));
    if (std::signbit(qs[code]) != std::signbit(m)) code += m > 0.0f ? 1 : -1;
    return code;
}

// The loop of the 1-state block-wise steps (Lion8bit, SGD8bit) over inputs params..., grads...,
// codes..., absmax... (N each): per 256-block, elem(p, g, i, mi) updates p[i] from the element's
// dequantised state mi and returns its new state; the block's new absmax and the requantised codes
// (sign kept, lion8bit_code) follow.
template <class Elem>
void one_state_8bit(CpuCtx& c, int N, const float* qs, const Elem& elem) {
    for (int tensor = 0; tensor < N; tensor++) {
        float* p = mut_f32(c, tensor);
        const float* g = c.in_f32(N + tensor);
        uint8_t* cm = mut_u8(c, 2 * N + tensor);
        float* am = mut_f32(c, 3 * N + tensor);
        const int64_t n = c.in[size_t(tensor)].numel(), blocks = (n + kAdam8bitBlock - 1) / kAdam8bitBlock;
        parallel_for(blocks, 16, [&](int64_t lo, int64_t hi) {
            float m[kAdam8bitBlock];
            for (int64_t b = lo; b < hi; b++) {
                const int64_t base = b * kAdam8bitBlock, len = std::min<int64_t>(kAdam8bitBlock, n - base);
                float new_am = 0.0f;
                for (int64_t k = 0; k < len; k++) {
                    const int64_t i = base + k;
                    m[k] = elem(p, g, i, qs[cm[i]] * am[b]);
                    new_am = std::max(new_am, std::fabs(m[k]));
                }
                const float inv = adam8bit_inverse(new_am);
                for (int64_t k = 0; k < len; k++) cm[base + k] = uint8_t(lion8bit_code(qs, m[k], new_am, inv));
                am[b] = new_am;
            }
        });
    }
}

static void lion8bit_cpu(CpuCtx& c) {
    const int N = int(c.p().i[1]);
    const GradGate gate = grad_gate(c, 4 * N + 1);
    if (gate.skip) return;
    const float* h = c.in_f32(4 * N);
    const float lr = h[kLr], b1 = h[kBeta1], b2 = h[kBeta2], gs = h[kGradScale];
    const float decay = 1.0f - lr * h[kWeightDecay];
    one_state_8bit(c, N, adam8bit_qmap(true), [&](float* p, const float* g, int64_t i, float mi) {
        const float gi = (g[i] * gs) * gate.mul;
        const float ci = mi * b1 + (1.0f - b1) * gi;
        const float u = ci > 0.0f ? 1.0f : (ci < 0.0f ? -1.0f : 0.0f);
        p[i] = p[i] * decay - lr * u;
        return mi * b2 + (1.0f - b2) * gi;
    });
}

void lion8bit_step(Graph& g, const std::vector<ValueId>& params, const std::vector<ValueId>& grads,
                   const std::vector<ValueId>& m, const std::vector<ValueId>& absmax_m, ValueId hyper, ValueId gstat) {
    Params p;
    p.i[1] = int64_t(params.size());
    g.apply(Op::lion8bit_step, multi_inputs({&params, &grads, &m, &absmax_m}, {hyper, gstat}), p);
}

// ------ sgd8bit_step(params..., grads..., buf u8..., absmax..., hyper[, gstat]); p.i[1] = N ------
// bitsandbytes' 1-state block-wise kernel for MOMENTUM (SGD8bit): g += wd p (wd > 0); buf = g at
// step 1, else momentum buf + g (no dampening, no Nesterov: bitsandbytes takes both arguments and
// uses neither); p -= lr buf; the buffer requantised as Lion8bit's moment (sign kept).
// Params: f[0] momentum. hyper: lr, weight_decay, step, grad_scale.

static std::vector<OutSpec> sgd8bit_infer(const OpCall& c) {
    c.check(c.p.f[0] > 0.0f && c.p.f[0] <= 1.0f, "momentum must lie in (0, 1]");
    return lion8bit_infer(c);
}

static void sgd8bit_cpu(CpuCtx& c) {
    const int N = int(c.p().i[1]);
    const GradGate gate = grad_gate(c, 4 * N + 1);
    if (gate.skip) return;
    const float* h = c.in_f32(4 * N);
    const float lr = h[kLr], wd = h[kWeightDecay], gs = h[kGradScale], mom = c.p().f[0];
    const bool first = h[kStep] == 1.0f;
    one_state_8bit(c, N, adam8bit_qmap(true), [&](float* p, const float* g, int64_t i, float mi) {
        float gi = (g[i] * gs) * gate.mul;
        if (wd > 0.0f) gi = gi + p[i] * wd;
        const float m = first ? gi : mi * mom + gi;
        p[i] = p[i] - lr * m;
        return m;
    });
}

void sgd8bit_step(Graph& g, const std::vector<ValueId>& params, const std::vector<ValueId>& grads,
                  const std::vector<ValueId>& buf, const std::vector<ValueId>& absmax, ValueId hyper, float momentum,
                  ValueId gstat) {
    Params p;
    p.i[1] = int64_t(params.size());
    p.f[0] = momentum;
    g.apply(Op::sgd8bit_step, multi_inputs({&params, &grads, &buf, &absmax}, {hyper, gstat}), p);
}

const OpDef def_sgd8bit_step{"sgd8bit_step", "adam8bit", sgd8bit_infer, multi_step_cost, nullptr, sgd8bit_cpu,
                             kOpNoGrad | kOpMutates};

const OpDef def_lion8bit_step{"lion8bit_step", "adam8bit", lion8bit_infer, multi_step_cost, nullptr, lion8bit_cpu,
                              kOpNoGrad | kOpMutates};

const OpDef def_adamw8bit_step{"adamw8bit_step", "adam8bit", adamw8bit_infer, multi_step_cost, nullptr, adamw8bit_cpu,
                               kOpNoGrad | kOpMutates};

}  // namespace gl
