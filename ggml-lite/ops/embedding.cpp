// Embeddings: table lookup (CLIP token and position embeddings), its deterministic
// scatter-add gradient, and diffusers' sinusoidal timestep embedding.
#include "ggml-lite/ops/family.h"

namespace gl {

namespace {

// Throws unless every id lies in [0, V). Runs before any output is written.
void check_ids(const char* op, const int32_t* ids, int64_t n, int64_t V) {
    for (int64_t i = 0; i < n; i++)
        GL_CHECK(ids[i] >= 0 && ids[i] < V, op, ": ids[", i, "] = ", ids[i], " is out of range for a table of ", V,
                 " rows (valid ids are 0..", V - 1, ")");
}

}  // namespace

// ---------------- embedding: inputs {table [V, D], ids i32 [...]} -> [..., D] ----------------

static std::vector<OutSpec> embedding_infer(const OpCall& c) {
    c.check(c.n_in() == 2, "takes {table, ids}");
    c.check(dtype_is_float(c.dtype(0)), "table must be floating point");
    c.check(c.shape(0).nd == 2, "table must be [V, D]");
    c.check(c.dtype(1) == DType::i32, "ids must be i32");
    const Shape& ids = c.shape(1);
    c.check(ids.nd < kMaxDims, "ids may have at most ", kMaxDims - 1, " dims");
    Shape s = ids;
    s.d[size_t(s.nd)] = c.shape(0).d[1];
    s.nd++;
    return {dense(c.dtype(0), s)};
}
static Cost embedding_cost(const OpCall& c) {
    double rows = double(c.shape(1).numel());
    return {0, rows * (4 + 2 * double(c.shape(0).d[1]) * double(dtype_size(c.dtype(0))))};
}
static void embedding_backward(BackwardCtx& b) {
    Params p;
    p.i[0] = b.g.shape(b.in(0)).d[0];
    b.add(0, b.g.apply1(Op::embedding_grad, {b.grad(), b.in(1)}, p));
}
static void embedding_cpu(CpuCtx& c) {
    const TensorRef& table = c.in[0];
    const int64_t V = c.in_shape(0).d[0], D = c.in_shape(0).d[1], n = c.in[1].numel();
    const int32_t* ids = c.in_i32(1);
    check_ids("embedding", ids, n, V);
    float* y = c.out_f32(0);
    // Reads only the rows asked for: a bf16 vocabulary table is not converted as a whole.
    parallel_for(n, std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(D, 1)), [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; i++) {
            const int64_t row = int64_t(ids[i]) * D;
            float* out = y + i * D;
            if (table.dense() && table.dtype == DType::f32) {
                std::memcpy(out, static_cast<const float*>(table.data) + table.layout.offset + row, size_t(D) * 4);
            } else {
                for (int64_t j = 0; j < D; j++) out[j] = load_as_f32(table.data, table.dtype, table.layout.index_of(row + j));
            }
        }
    });
}

ValueId embedding(Graph& g, ValueId table, ValueId ids) { return g.apply1(Op::embedding, {table, ids}); }

const OpDef def_embedding{"embedding", "embedding", embedding_infer, embedding_cost, embedding_backward, embedding_cpu, 0};

// ---------------- embedding_grad: inputs {gy [..., D], ids i32 [...]}, p.i[0] = V -> f32 [V, D] ----------------
// Row v sums gy over the positions holding id v, in position order (a counting sort
// groups them), so the result does not depend on threading.

static std::vector<OutSpec> embedding_grad_infer(const OpCall& c) {
    c.check(c.n_in() == 2, "takes {gy, ids}");
    c.check(dtype_is_float(c.dtype(0)), "gy must be floating point");
    c.check(c.dtype(1) == DType::i32, "ids must be i32");
    c.check(c.p.i[0] > 0, "table rows p.i[0] must be positive, got ", c.p.i[0]);
    const Shape& gy = c.shape(0);
    const Shape& ids = c.shape(1);
    bool ok = gy.nd == ids.nd + 1;
    for (int k = 0; ok && k < ids.nd; k++) ok = gy.d[size_t(k)] == ids.d[size_t(k)];
    c.check(ok, "gy must be [..., D] over ids [...]");
    return {dense(DType::f32, Shape{c.p.i[0], gy.last()})};
}
static Cost embedding_grad_cost(const OpCall& c) {
    double gy = double(c.shape(0).numel());
    return {gy, gy * double(dtype_size(c.dtype(0))) + double(c.p.i[0]) * double(c.shape(0).last()) * 4};
}
static void embedding_grad_cpu(CpuCtx& c) {
    const float* gy = c.in_f32(0);
    const int32_t* ids = c.in_i32(1);
    const int64_t V = c.p().i[0], D = c.in_shape(0).last(), n = c.in[1].numel();
    check_ids("embedding_grad", ids, n, V);
    std::vector<int64_t> start(static_cast<size_t>(V + 1), 0), order(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; i++) start[size_t(ids[i]) + 1]++;
    for (int64_t v = 0; v < V; v++) start[size_t(v + 1)] += start[size_t(v)];
    std::vector<int64_t> next(start.begin(), start.end() - 1);
    for (int64_t i = 0; i < n; i++) order[size_t(next[size_t(ids[i])]++)] = i;
    float* gt = c.out_f32(0);
    parallel_for(V, std::max<int64_t>(1, (1 << 12) / std::max<int64_t>(D, 1)), [&](int64_t lo, int64_t hi) {
        std::vector<double> acc(static_cast<size_t>(D));
        for (int64_t v = lo; v < hi; v++) {
            std::fill(acc.begin(), acc.end(), 0.0);
            for (int64_t k = start[size_t(v)]; k < start[size_t(v + 1)]; k++) {
                const float* row = gy + order[size_t(k)] * D;
                for (int64_t j = 0; j < D; j++) acc[size_t(j)] += row[j];
            }
            for (int64_t j = 0; j < D; j++) gt[v * D + j] = float(acc[size_t(j)]);
        }
    });
}

const OpDef def_embedding_grad{"embedding_grad", "embedding", embedding_grad_infer, embedding_grad_cost, nullptr,
                               embedding_grad_cpu, kOpGradHelper};

// ---------------- timestep_embedding: input t [B] -> f32 [B, dim] ----------------
// p.i[0] dim, p.i[1] flip_sin_to_cos, p.f[0] shift (downscale_freq_shift), p.f[1] max_period.
// As diffusers' get_timestep_embedding (in f32, like it): half = dim / 2,
// freq_i = exp(-ln(max_period) * i / (half - shift)), arg = t * freq_i,
// out = [sin(arg), cos(arg)] ([cos, sin] when flipped), one zero appended when dim is odd.

static std::vector<OutSpec> timestep_infer(const OpCall& c) {
    c.check(c.n_in() == 1, "takes one input t [B]");
    c.check(dtype_is_float(c.dtype(0)), "t must be floating point");
    c.check(c.shape(0).nd == 1, "t must be [B]");
    const int64_t dim = c.p.i[0];
    c.check(dim >= 1, "dim must be positive, got ", dim);
    c.check(c.p.f[1] > 0, "max_period must be positive, got ", c.p.f[1]);
    c.check(dim / 2 == 0 || float(dim / 2) - c.p.f[0] != 0.0f, "shift must differ from dim / 2");
    return {dense(DType::f32, Shape{c.shape(0).d[0], dim})};
}
static Cost timestep_cost(const OpCall& c) {
    double n = double(c.shape(0).d[0]) * double(c.p.i[0]);
    return {20 * n, 4 * n + call_bytes_in(c, 0)};
}
static void timestep_cpu(CpuCtx& c) {
    const float* t = c.in_f32(0);
    float* y = c.out_f32(0);
    const int64_t B = c.in_shape(0).d[0], dim = c.p().i[0], half = dim / 2;
    const bool flip = c.p().i[1] != 0;
    const float shift = c.p().f[0], neg_log_period = -std::log(c.p().f[1]);
    std::vector<float> freq(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; i++) freq[size_t(i)] = std::exp(neg_log_period * float(i) / (float(half) - shift));
    for (int64_t b = 0; b < B; b++) {
        float* row = y + b * dim;
        float* sin_part = row + (flip ? half : 0);
        float* cos_part = row + (flip ? 0 : half);
        for (int64_t i = 0; i < half; i++) {
            const float arg = t[b] * freq[size_t(i)];
            sin_part[i] = std::sin(arg);
            cos_part[i] = std::cos(arg);
        }
        if (dim % 2) row[dim - 1] = 0.0f;
    }
}

ValueId timestep_embedding(Graph& g, ValueId t, int dim, bool flip_sin_to_cos, float shift, float max_period) {
    Params p;
    p.i[0] = dim;
    p.i[1] = flip_sin_to_cos ? 1 : 0;
    p.f[0] = shift;
    p.f[1] = max_period;
    return g.apply1(Op::timestep_embedding, {t}, p);
}

const OpDef def_timestep_embedding{"timestep_embedding", "embedding", timestep_infer, timestep_cost, nullptr,
                                   timestep_cpu, kOpNoGrad};

}  // namespace gl
