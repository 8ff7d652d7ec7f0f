// Random draws as ops: normal_noise, the diffusion step's noise (with kohya's offset noise) from
// the counter-based generator, its seed and position read from a device tensor, so a captured step
// replays with new draws when the host writes a new position (a few bytes instead of the noise).
// The math (ops/rng_normal.h) is shared with the CUDA kernel: both give the same floats.
#include <bit>

#include "ggml-lite/ops/family.h"
#include "ggml-lite/ops/rng_normal.h"

namespace gl {

// ---- normal_noise: {draw i32 [>= kNoiseDrawSize]} -> f32 [shape]; p.i[0..4] = shape ----

static std::vector<OutSpec> normal_noise_infer(const OpCall& c) {
    c.check(c.n_in() == 1, "takes {draw}");
    c.check(c.dtype(0) == DType::i32 && c.shape(0).numel() >= kNoiseDrawSize, "draw must be i32 with at least ",
            int(kNoiseDrawSize), " elements");
    const Shape s = shape_from_params(c.p);
    c.check(s.nd >= 1 && s.numel() >= 1, "noise shape ", s.str(), " must hold at least one element");
    return {dense(DType::f32, s)};
}

// Two 53-bit draws, a log, a cosine and a square root in double per element; three times that with
// offset noise (the sample's offset is redrawn per element rather than staged).
static Cost normal_noise_cost(const OpCall& c) {
    const double n = double(shape_from_params(c.p).numel());
    return {600.0 * n, 4.0 * n};
}

static void normal_noise_cpu(CpuCtx& c) {
    const int32_t* d = c.in_i32(0);
    const uint64_t seed = noise_draw_u64(d, kNdSeed), counter = noise_draw_u64(d, kNdCounter);
    const double offset = std::bit_cast<double>(noise_draw_u64(d, kNdOffset));
    const Shape& s = c.out_shape(0);
    const int64_t n = s.numel(), batch = s.d[0], channels = s.last();
    float* y = c.out_f32(0);
    parallel_for(n, 1 << 10, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; i++) y[i] = noise_element(seed, counter, offset, i, n, batch, channels);
    });
}

ValueId normal_noise(Graph& g, ValueId draw, const Shape& shape) {
    Params p;
    shape_to_params(p, shape);
    return g.apply1(Op::normal_noise, {draw}, p);
}

const OpDef def_normal_noise{"normal_noise", "random", normal_noise_infer, normal_noise_cost, nullptr, normal_noise_cpu,
                             kOpNoGrad};

}  // namespace gl
