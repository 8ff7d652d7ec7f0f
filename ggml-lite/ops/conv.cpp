// 2-D convolution on NHWC maps (forward, input gradient, weight gradient) and nearest 2x
// upsampling. Conv weights are [Cout, k, k, Cin]; square kernels, any k >= 1, stride >= 1,
// zero padding >= 0; Ho = (H + 2 pad - k) / stride + 1 (floor), as in PyTorch.
// CPU kernels are direct convolutions run as GEMMs over taps, no im2col buffer: for each tap,
// 4 output pixels (or, for the weight gradient, 4 output channels) form the rows of a
// gemm_block (ops/cpu_gemm.h) against weights repacked so its columns are contiguous; float
// block sums fold into double accumulators in a fixed order, independent of the thread count.
#include <algorithm>

#include "ggml-lite/ops/cpu_gemm.h"
#include "ggml-lite/ops/family.h"
#include "ggml-lite/ops/quant.h"
#include "ggml-lite/ops/residual.h"

namespace gl {
namespace {

constexpr int64_t kPixTile = kGemmRows;  // output pixels per task
constexpr int64_t kChanTile = 256;       // output channels per task

int64_t conv_out(int64_t size, int64_t k, int64_t stride, int64_t pad) { return (size + 2 * pad - k) / stride + 1; }

bool same_float(const OpCall& c) {
    for (int i = 0; i < c.n_in(); i++)
        if (!dtype_is_float(c.dtype(i)) || c.dtype(i) != c.dtype(0)) return false;
    return true;
}

// The dtypes of a call whose input 1 is a weight: every input one float dtype, or (quantized)
// the weight's codes and scale checked by ops/quant.h and the others one float dtype.
void check_weight_dtypes(const OpCall& c) {
    c.check(c.p.i[kQuantSlot] == 0 || c.p.i[kQuantSlot] == 1, "the quantized flag must be 0 or 1");
    if (!is_quantized(c.p)) {
        c.check(same_float(c), "inputs must share one floating-point dtype");
        return;
    }
    check_quant_weight(c, 1);
    for (int i = 0; i < c.n_in() - 1; i++)
        if (i != 1) c.check(dtype_is_float(c.dtype(i)) && c.dtype(i) == c.dtype(0), "inputs besides the weight must share one floating-point dtype");
}

void check_stride_pad(const OpCall& c) {
    c.check(c.p.i[0] >= 1, "stride must be >= 1, got ", c.p.i[0]);
    c.check(c.p.i[1] >= 0, "pad must be >= 0, got ", c.p.i[1]);
}

// out[n, oh, ow, :] = bias + sum over taps (kh, kw) and source channels c of
// src[n, sh, sw, c] * wt[kh * k + kw][c][:], where (sh, sw) is the source pixel of the tap:
// forward reads x at (oh * s - p + kh); the input gradient reads gy at the (sh, sw) whose
// forward tap lands on (oh, ow), i.e. sh * s - p + kh = oh.
struct TapConv {
    int64_t N = 0, Hs = 0, Ws = 0, Cs = 0;  // source map [N, Hs, Ws, Cs]
    int64_t Ho = 0, Wo = 0, Co = 0;         // output map [N, Ho, Wo, Co]
    int64_t k = 1, stride = 1, pad = 0;
    bool grad_input = false;
    const float* src = nullptr;
    const float* wt = nullptr;  // [k * k][Cs][Co]
    const float* bias = nullptr;
    float* out = nullptr;

    int64_t source(int64_t o, int64_t tap, int64_t extent) const {
        int64_t s;
        if (!grad_input) {
            s = o * stride - pad + tap;
        } else {
            const int64_t t = o + pad - tap;
            if (t < 0 || t % stride != 0) return -1;
            s = t / stride;
        }
        return s >= 0 && s < extent ? s : -1;
    }
};

void tap_conv_tile(const TapConv& t, int64_t n, int64_t oh, int64_t ow0, int64_t c0) {
    const int64_t np = std::min(kPixTile, t.Wo - ow0), nc = std::min(kChanTile, t.Co - c0);
    float a_blk[kGemmDepth][kPixTile];  // source channels x pixels; pixels off the map stay zero
    float part[kPixTile][kChanTile];
    double acc[kPixTile][kChanTile] = {};
    for (int64_t kh = 0; kh < t.k; kh++) {
        const int64_t sh = t.source(oh, kh, t.Hs);
        if (sh < 0) continue;
        for (int64_t kw = 0; kw < t.k; kw++) {
            const float* rows[kPixTile] = {};
            bool any = false;
            for (int64_t p = 0; p < np; p++) {
                const int64_t sw = t.source(ow0 + p, kw, t.Ws);
                if (sw < 0) continue;
                rows[p] = t.src + ((n * t.Hs + sh) * t.Ws + sw) * t.Cs;
                any = true;
            }
            if (!any) continue;
            const float* wtap = t.wt + (kh * t.k + kw) * t.Cs * t.Co + c0;
            for (int64_t cb = 0; cb < t.Cs; cb += kGemmDepth) {
                const int64_t depth = std::min(t.Cs - cb, kGemmDepth);
                for (int64_t ci = 0; ci < depth; ci++)
                    for (int64_t p = 0; p < kPixTile; p++) a_blk[ci][p] = rows[p] ? rows[p][cb + ci] : 0.0f;
                gemm_block(&a_blk[0][0], wtap + cb * t.Co, t.Co, depth, nc, &part[0][0], kChanTile);
                for (int64_t p = 0; p < np; p++)
                    for (int64_t j = 0; j < nc; j++) acc[p][j] += double(part[p][j]);
            }
        }
    }
    for (int64_t p = 0; p < np; p++) {
        float* o = t.out + ((n * t.Ho + oh) * t.Wo + ow0 + p) * t.Co + c0;
        for (int64_t j = 0; j < nc; j++) o[j] = float(acc[p][j] + (t.bias ? double(t.bias[c0 + j]) : 0.0));
    }
}

void tap_conv(const TapConv& t) {
    const int64_t wt_tiles = (t.Wo + kPixTile - 1) / kPixTile, ct = (t.Co + kChanTile - 1) / kChanTile;
    const int64_t per_row = wt_tiles * ct;
    const int64_t tile_work = kPixTile * std::min(kChanTile, t.Co) * t.k * t.k * std::max<int64_t>(t.Cs, 1);
    parallel_for(t.N * t.Ho * per_row, std::max<int64_t>(1, (int64_t(1) << 16) / tile_work), [&](int64_t a, int64_t b) {
        for (int64_t i = a; i < b; i++) {
            const int64_t row = i / per_row, rest = i % per_row;
            tap_conv_tile(t, row / t.Ho, row % t.Ho, (rest / ct) * kPixTile, (rest % ct) * kChanTile);
        }
    });
}

// w [Co][taps][Ci] -> [taps][Ci][Co] (forward: contract over Ci, run over Co).
std::vector<float> pack_forward(const float* w, int64_t Co, int64_t taps, int64_t Ci) {
    std::vector<float> r(size_t(Co * taps * Ci));
    parallel_for(taps * Ci, 64, [&](int64_t a, int64_t b) {
        for (int64_t tc = a; tc < b; tc++)
            for (int64_t co = 0; co < Co; co++) r[size_t(tc * Co + co)] = w[co * taps * Ci + tc];
    });
    return r;
}

// w [Co][taps][Ci] -> [taps][Co][Ci] (input gradient: contract over Co, run over Ci).
std::vector<float> pack_grad_input(const float* w, int64_t Co, int64_t taps, int64_t Ci) {
    std::vector<float> r(size_t(Co * taps * Ci));
    for (int64_t tap = 0; tap < taps; tap++)
        for (int64_t co = 0; co < Co; co++)
            std::memcpy(&r[size_t((tap * Co + co) * Ci)], w + (co * taps + tap) * Ci, size_t(Ci) * 4);
    return r;
}

// Every variant does the forward's multiply-adds: one per (output pixel, Cout, tap, Cin).
Cost conv_cost(const OpCall& c, const Shape& y, int64_t k, int64_t cin, const Shape& out) {
    const double flops = 2.0 * double(y.numel()) * double(k * k) * double(cin);
    return {flops, call_bytes_all_in(c) + double(out.numel()) * double(dtype_size(c.dtype(0)))};
}

}  // namespace

// ---------------- conv2d: p.i[0] stride, p.i[1] pad, p.i[kQuantSlot] quantized w, p.i[kResidualSlot] residual ----------------
// Inputs {x [N, H, W, Cin], w [Cout, k, k, Cin]} or plus bias [Cout]; one float dtype. Quantized
// (ops/quant.h): w holds codes and w's scale [Cout] follows as the last input. With a residual
// (ops/residual.h) r [N, Ho, Wo, Cout] follows: out = conv + bias + r.

static bool conv2d_has_bias(const Params& p, int n_in) { return operand_inputs(p, n_in) == 3; }

static std::vector<OutSpec> conv2d_infer(const OpCall& c) {
    const int n = operand_inputs(c.p, c.n_in());
    c.check(n == 2 || n == 3, "takes x, w and an optional bias (and a residual, a quantized w's scale)");
    check_weight_dtypes(c);
    const Shape &x = c.shape(0), &w = c.shape(1);
    c.check(x.nd == 4, "x must be NHWC [N, H, W, Cin]");
    c.check(w.nd == 4 && w.d[1] == w.d[2] && w.d[1] >= 1, "w must be [Cout, k, k, Cin]");
    c.check(w.d[3] == x.d[3], "x has ", x.d[3], " channels, w expects ", w.d[3]);
    check_stride_pad(c);
    if (n == 3) c.check(c.shape(2) == Shape{w.d[0]}, "bias must be [", w.d[0], "]");
    const int64_t k = w.d[1], s = c.p.i[0], p = c.p.i[1];
    c.check(x.d[1] + 2 * p >= k && x.d[2] + 2 * p >= k, "kernel ", k, " is larger than the padded input");
    const OutSpec spec = dense(c.dtype(0), {x.d[0], conv_out(x.d[1], k, s, p), conv_out(x.d[2], k, s, p), w.d[0]});
    check_residual(c, spec);
    return {spec};
}

static Cost conv2d_cost(const OpCall& c) {
    const Shape out = conv2d_infer(c)[0].layout.shape;
    return conv_cost(c, out, c.shape(1).d[1], c.shape(0).d[3], out);
}

static void conv2d_backward(BackwardCtx& bc) {
    Graph& g = bc.g;
    const int stride = int(bc.p().i[0]), pad = int(bc.p().i[1]), n_in = int(bc.node.in.size());
    const Shape xs = g.shape(bc.in(0)), ws = g.shape(bc.in(1));
    const bool quant = is_quantized(bc.p());
    if (quant) GL_CHECK(!bc.wants(1) && !bc.wants(n_in - 1), "conv2d: a quantized weight is frozen and has no gradient");
    if (bc.wants(0)) {
        bc.add(0, quant ? conv2d_grad_input(g, bc.grad(), QuantWeight{bc.in(1), bc.in(n_in - 1)}, stride, pad, xs.d[1], xs.d[2])
                        : conv2d_grad_input(g, bc.grad(), bc.in(1), stride, pad, xs.d[1], xs.d[2]));
    }
    if (!quant && bc.wants(1)) bc.add(1, conv2d_grad_weight(g, bc.grad(), bc.in(0), stride, pad, ws.d[1]));
    if (conv2d_has_bias(bc.p(), n_in) && bc.wants(2)) bc.add(2, sum_to(g, bc.grad(), {ws.d[0]}));
    if (has_residual(bc.p()) && bc.wants(residual_index(bc.p(), n_in))) bc.add(residual_index(bc.p(), n_in), bc.grad());
}

static void conv2d_cpu(CpuCtx& c) {
    const Shape &x = c.in_shape(0), &w = c.in_shape(1), &y = c.out_shape(0);
    TapConv t;
    t.N = x.d[0], t.Hs = x.d[1], t.Ws = x.d[2], t.Cs = x.d[3];
    t.Ho = y.d[1], t.Wo = y.d[2], t.Co = y.d[3];
    t.k = w.d[1], t.stride = c.p().i[0], t.pad = c.p().i[1];
    t.src = c.in_f32(0);
    std::vector<float> dequant;
    const std::vector<float> wt = pack_forward(cpu_weight(c, 1, dequant), t.Co, t.k * t.k, t.Cs);
    t.wt = wt.data();
    t.bias = conv2d_has_bias(c.p(), c.n_in()) ? c.in_f32(2) : nullptr;
    t.out = c.out_f32(0);
    std::vector<float> r_copy;
    const float* r = cpu_residual(c, t.out, r_copy);
    tap_conv(t);
    add_cpu_residual(r, t.out, y.numel());
}

ValueId conv2d(Graph& g, ValueId x, ValueId w, ValueId bias, int stride, int pad) {
    Params p;
    p.i[0] = stride;
    p.i[1] = pad;
    if (bias == kNoValue) return g.apply1(Op::conv2d, {x, w}, p);
    return g.apply1(Op::conv2d, {x, w, bias}, p);
}

ValueId conv2d(Graph& g, ValueId x, const QuantWeight& w, ValueId bias, int stride, int pad) {
    Params p;
    p.i[0] = stride;
    p.i[1] = pad;
    p.i[kQuantSlot] = 1;
    if (bias == kNoValue) return g.apply1(Op::conv2d, {x, w.q, w.scale}, p);
    return g.apply1(Op::conv2d, {x, w.q, bias, w.scale}, p);
}

ValueId conv2d_add(Graph& g, ValueId x, ValueId w, ValueId bias, ValueId r, int stride, int pad) {
    Params p;
    p.i[0] = stride;
    p.i[1] = pad;
    p.i[kResidualSlot] = 1;
    if (bias == kNoValue) return g.apply1(Op::conv2d, {x, w, r}, p);
    return g.apply1(Op::conv2d, {x, w, bias, r}, p);
}

const OpDef def_conv2d{"conv2d", "conv", conv2d_infer, conv2d_cost, conv2d_backward, conv2d_cpu, 0,
                       residual_input_of, take_residual};

// ------- conv2d_grad_input: p.i[0] stride, p.i[1] pad, p.i[2] H, p.i[3] W, p.i[kQuantSlot] quantized w,
// p.i[kResidualSlot] residual -------
// Inputs {gy [N, Ho, Wo, Cout], w [Cout, k, k, Cin]} -> dx [N, H, W, Cin]. H and W are
// explicit because a strided conv maps several input sizes to the same output size. Quantized:
// {gy, w codes, w's scale [Cout]}. With a residual r [N, H, W, Cin] after w: dx + r (the sum of
// an input's gradients, folded in by the fusion pass).

static std::vector<OutSpec> conv2d_grad_input_infer(const OpCall& c) {
    c.check(operand_inputs(c.p, c.n_in()) == 2, "takes gy and w (and a residual, a quantized w's scale)");
    check_weight_dtypes(c);
    const Shape &gy = c.shape(0), &w = c.shape(1);
    c.check(gy.nd == 4, "gy must be NHWC [N, Ho, Wo, Cout]");
    c.check(w.nd == 4 && w.d[1] == w.d[2] && w.d[1] >= 1, "w must be [Cout, k, k, Cin]");
    c.check(gy.d[3] == w.d[0], "gy has ", gy.d[3], " channels, w has Cout ", w.d[0]);
    check_stride_pad(c);
    const int64_t k = w.d[1], s = c.p.i[0], p = c.p.i[1], H = c.p.i[2], W = c.p.i[3];
    c.check(H >= 1 && W >= 1 && H + 2 * p >= k && W + 2 * p >= k, "invalid input size ", H, "x", W);
    c.check(conv_out(H, k, s, p) == gy.d[1] && conv_out(W, k, s, p) == gy.d[2],
            "an input of ", H, "x", W, " does not give gy's ", gy.d[1], "x", gy.d[2]);
    const OutSpec spec = dense(c.dtype(0), {gy.d[0], H, W, w.d[3]});
    check_residual(c, spec);
    return {spec};
}

static Cost conv2d_grad_input_cost(const OpCall& c) {
    const Shape &gy = c.shape(0), &w = c.shape(1);
    const Shape out{gy.d[0], c.p.i[2], c.p.i[3], w.d[3]};
    return conv_cost(c, gy, w.d[1], w.d[3], out);
}

static void conv2d_grad_input_cpu(CpuCtx& c) {
    const Shape &gy = c.in_shape(0), &w = c.in_shape(1), &dx = c.out_shape(0);
    TapConv t;
    t.N = gy.d[0], t.Hs = gy.d[1], t.Ws = gy.d[2], t.Cs = gy.d[3];
    t.Ho = dx.d[1], t.Wo = dx.d[2], t.Co = dx.d[3];
    t.k = w.d[1], t.stride = c.p().i[0], t.pad = c.p().i[1];
    t.grad_input = true;
    t.src = c.in_f32(0);
    std::vector<float> dequant;
    const std::vector<float> wt = pack_grad_input(cpu_weight(c, 1, dequant), t.Cs, t.k * t.k, t.Co);
    t.wt = wt.data();
    t.out = c.out_f32(0);
    std::vector<float> r_copy;
    const float* r = cpu_residual(c, t.out, r_copy);
    tap_conv(t);
    add_cpu_residual(r, t.out, dx.numel());
}

ValueId conv2d_grad_input(Graph& g, ValueId gy, ValueId w, int stride, int pad, int64_t H, int64_t W) {
    Params p;
    p.i[0] = stride;
    p.i[1] = pad;
    p.i[2] = H;
    p.i[3] = W;
    return g.apply1(Op::conv2d_grad_input, {gy, w}, p);
}

ValueId conv2d_grad_input(Graph& g, ValueId gy, const QuantWeight& w, int stride, int pad, int64_t H, int64_t W) {
    Params p;
    p.i[0] = stride;
    p.i[1] = pad;
    p.i[2] = H;
    p.i[3] = W;
    p.i[kQuantSlot] = 1;
    return g.apply1(Op::conv2d_grad_input, {gy, w.q, w.scale}, p);
}

ValueId conv2d_grad_input_add(Graph& g, ValueId gy, ValueId w, ValueId r, int stride, int pad, int64_t H, int64_t W) {
    Params p;
    p.i[0] = stride;
    p.i[1] = pad;
    p.i[2] = H;
    p.i[3] = W;
    p.i[kResidualSlot] = 1;
    return g.apply1(Op::conv2d_grad_input, {gy, w, r}, p);
}

const OpDef def_conv2d_grad_input{"conv2d_grad_input", "conv", conv2d_grad_input_infer, conv2d_grad_input_cost,
                                  nullptr, conv2d_grad_input_cpu, kOpGradHelper, residual_input_of, take_residual};

// ---------------- conv2d_grad_weight: p.i[0] stride, p.i[1] pad, p.i[2] k ----------------
// Inputs {gy [N, Ho, Wo, Cout], x [N, H, W, Cin]} -> dw [Cout, k, k, Cin].

static std::vector<OutSpec> conv2d_grad_weight_infer(const OpCall& c) {
    c.check(c.n_in() == 2, "takes gy and x");
    c.check(same_float(c), "inputs must share one floating-point dtype");
    const Shape &gy = c.shape(0), &x = c.shape(1);
    c.check(gy.nd == 4 && x.nd == 4, "gy and x must be NHWC");
    c.check(gy.d[0] == x.d[0], "gy and x differ in batch size");
    check_stride_pad(c);
    const int64_t s = c.p.i[0], p = c.p.i[1], k = c.p.i[2];
    c.check(k >= 1 && x.d[1] + 2 * p >= k && x.d[2] + 2 * p >= k, "invalid kernel size ", k);
    c.check(conv_out(x.d[1], k, s, p) == gy.d[1] && conv_out(x.d[2], k, s, p) == gy.d[2],
            "x's ", x.d[1], "x", x.d[2], " does not give gy's ", gy.d[1], "x", gy.d[2]);
    return {dense(c.dtype(0), {gy.d[3], k, k, x.d[3]})};
}

static Cost conv2d_grad_weight_cost(const OpCall& c) {
    const Shape &gy = c.shape(0), &x = c.shape(1);
    const int64_t k = c.p.i[2];
    return conv_cost(c, gy, k, x.d[3], Shape{gy.d[3], k, k, x.d[3]});
}

// dw[co, kh, kw, :] = sum over output pixels q of gy[q, co] * x[source of q under the tap]:
// per tap, a GEMM with 4 output channels as rows and the pixels of one output row as depth;
// consecutive pixels read x rows stride * Cin apart.
static void conv2d_grad_weight_cpu(CpuCtx& c) {
    const Shape &gys = c.in_shape(0), &xs = c.in_shape(1);
    const int64_t N = xs.d[0], H = xs.d[1], W = xs.d[2], Ci = xs.d[3];
    const int64_t Ho = gys.d[1], Wo = gys.d[2], Co = gys.d[3];
    const int64_t s = c.p().i[0], pad = c.p().i[1], k = c.p().i[2];
    const float* gy = c.in_f32(0);
    const float* x = c.in_f32(1);
    float* dw = c.out_f32(0);
    const int64_t rt = (Co + kGemmRows - 1) / kGemmRows, ct = (Ci + kChanTile - 1) / kChanTile;
    const int64_t tile_work = kGemmRows * std::min(kChanTile, Ci) * std::max<int64_t>(N * Ho * Wo, 1);
    parallel_for(k * k * rt * ct, std::max<int64_t>(1, (int64_t(1) << 16) / tile_work), [&](int64_t a, int64_t b) {
        for (int64_t task = a; task < b; task++) {
            const int64_t tap = task / (rt * ct), rest = task % (rt * ct);
            const int64_t kh = tap / k, kw = tap % k;
            const int64_t co0 = (rest / ct) * kGemmRows, c0 = (rest % ct) * kChanTile;
            const int64_t nr = std::min(kGemmRows, Co - co0), nc = std::min(kChanTile, Ci - c0);
            // Output columns whose tap lands inside the input: ow in [ow_lo, ow_hi).
            int64_t ow_lo = 0, ow_hi = Wo;
            while (ow_lo < Wo && ow_lo * s - pad + kw < 0) ow_lo++;
            while (ow_hi > ow_lo && (ow_hi - 1) * s - pad + kw >= W) ow_hi--;
            float a_blk[kGemmDepth][kGemmRows];  // pixels x output channels; channels past Co stay zero
            float part[kGemmRows][kChanTile];
            double acc[kGemmRows][kChanTile] = {};
            for (int64_t n = 0; n < N; n++)
                for (int64_t oh = 0; oh < Ho; oh++) {
                    const int64_t ih = oh * s - pad + kh;
                    if (ih < 0 || ih >= H) continue;
                    for (int64_t o0 = ow_lo; o0 < ow_hi; o0 += kGemmDepth) {
                        const int64_t depth = std::min(ow_hi - o0, kGemmDepth);
                        const float* g0 = gy + ((n * Ho + oh) * Wo + o0) * Co + co0;
                        for (int64_t q = 0; q < depth; q++)
                            for (int64_t r = 0; r < kGemmRows; r++) a_blk[q][r] = r < nr ? g0[q * Co + r] : 0.0f;
                        const float* x0 = x + ((n * H + ih) * W + o0 * s - pad + kw) * Ci + c0;
                        gemm_block(&a_blk[0][0], x0, s * Ci, depth, nc, &part[0][0], kChanTile);
                        for (int64_t r = 0; r < nr; r++)
                            for (int64_t j = 0; j < nc; j++) acc[r][j] += double(part[r][j]);
                    }
                }
            for (int64_t r = 0; r < nr; r++) {
                float* o = dw + ((co0 + r) * k * k + tap) * Ci + c0;
                for (int64_t j = 0; j < nc; j++) o[j] = float(acc[r][j]);
            }
        }
    });
}

ValueId conv2d_grad_weight(Graph& g, ValueId gy, ValueId x, int stride, int pad, int64_t k) {
    Params p;
    p.i[0] = stride;
    p.i[1] = pad;
    p.i[2] = k;
    return g.apply1(Op::conv2d_grad_weight, {gy, x}, p);
}

const OpDef def_conv2d_grad_weight{"conv2d_grad_weight", "conv", conv2d_grad_weight_infer, conv2d_grad_weight_cost,
                                   nullptr, conv2d_grad_weight_cpu, kOpGradHelper};

// ---------------- upsample2x: no params ----------------
// x [N, H, W, C] (float) -> [N, 2H, 2W, C], each pixel repeated over a 2x2 block.

static std::vector<OutSpec> upsample2x_infer(const OpCall& c) {
    c.check(c.n_in() == 1, "takes one input");
    c.check(dtype_is_float(c.dtype(0)), "input must be floating point");
    const Shape& x = c.shape(0);
    c.check(x.nd == 4, "x must be NHWC [N, H, W, C]");
    return {dense(c.dtype(0), {x.d[0], 2 * x.d[1], 2 * x.d[2], x.d[3]})};
}

static Cost upsample2x_cost(const OpCall& c) { return {0, 5 * call_bytes_in(c, 0)}; }
static void upsample2x_backward(BackwardCtx& bc) { bc.add(0, upsample2x_grad(bc.g, bc.grad())); }

static void upsample2x_cpu(CpuCtx& c) {
    const Shape& xs = c.in_shape(0);
    const int64_t H = xs.d[1], W = xs.d[2], C = xs.d[3];
    const float* x = c.in_f32(0);
    float* y = c.out_f32(0);
    parallel_for(xs.d[0] * H, 8, [&](int64_t a, int64_t b) {
        for (int64_t row = a; row < b; row++) {  // row = n * H + h
            const float* src = x + row * W * C;
            float* top = y + 2 * row * (2 * W * C);
            for (int64_t w = 0; w < W; w++) {
                std::memcpy(top + (2 * w) * C, src + w * C, size_t(C) * 4);
                std::memcpy(top + (2 * w + 1) * C, src + w * C, size_t(C) * 4);
            }
            std::memcpy(top + 2 * W * C, top, size_t(2 * W * C) * 4);
        }
    });
}

ValueId upsample2x(Graph& g, ValueId x) { return g.apply1(Op::upsample2x, {x}); }

const OpDef def_upsample2x{"upsample2x", "conv", upsample2x_infer, upsample2x_cost, upsample2x_backward,
                           upsample2x_cpu, 0};

// ---------------- upsample2x_grad: no params ----------------
// gy [N, 2H, 2W, C] -> [N, H, W, C], the sum of each 2x2 block.

static std::vector<OutSpec> upsample2x_grad_infer(const OpCall& c) {
    c.check(c.n_in() == 1, "takes one input");
    c.check(dtype_is_float(c.dtype(0)), "input must be floating point");
    const Shape& gy = c.shape(0);
    c.check(gy.nd == 4 && gy.d[1] % 2 == 0 && gy.d[2] % 2 == 0, "gy must be NHWC with even H and W");
    return {dense(c.dtype(0), {gy.d[0], gy.d[1] / 2, gy.d[2] / 2, gy.d[3]})};
}

static Cost upsample2x_grad_cost(const OpCall& c) { return {double(c.shape(0).numel()), 1.25 * call_bytes_in(c, 0)}; }
static void upsample2x_grad_backward(BackwardCtx& bc) { bc.add(0, upsample2x(bc.g, bc.grad())); }

static void upsample2x_grad_cpu(CpuCtx& c) {
    const Shape& ys = c.out_shape(0);
    const int64_t W = ys.d[2], C = ys.d[3];
    const float* gy = c.in_f32(0);
    float* dx = c.out_f32(0);
    parallel_for(ys.d[0] * ys.d[1], 8, [&](int64_t a, int64_t b) {
        for (int64_t row = a; row < b; row++) {  // row = n * H + h
            const float* top = gy + 2 * row * (2 * W * C);
            const float* bottom = top + 2 * W * C;
            float* o = dx + row * W * C;
            for (int64_t w = 0; w < W; w++)
                for (int64_t ch = 0; ch < C; ch++) {
                    const int64_t l = 2 * w * C + ch, r = l + C;
                    o[w * C + ch] = (top[l] + top[r]) + (bottom[l] + bottom[r]);
                }
        }
    });
}

ValueId upsample2x_grad(Graph& g, ValueId gy) { return g.apply1(Op::upsample2x_grad, {gy}); }

const OpDef def_upsample2x_grad{"upsample2x_grad", "conv", upsample2x_grad_infer, upsample2x_grad_cost,
                                upsample2x_grad_backward, upsample2x_grad_cpu, kOpGradHelper};

}  // namespace gl
