// Random frozen weights for the benchmarks that need no checkpoint (bench_step, bench_quant).
#pragma once
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ggml-lite/core/runtime.h"
#include "ggml-lite/ops/rng.h"
#include "models/nn/weights.h"

namespace bench {

// Random frozen weights in the leaf's dtype, quickly: PyTorch-default-like uniform(-1/sqrt(fan_in),
// 1/sqrt(fan_in)) for matrices and convs, ones for norm gains, zeros for biases. One buffer per
// (fan_in, dtype) is drawn once (counter-based, so it is cheap) and reused for every tensor. A
// quantized matrix is drawn in f32 and quantized per row, so every store format holds the same
// values up to its rounding.
inline void write_random_weights(const nn::Weights& w, gl::Runtime& rt) {
    const gl::Graph& g = rt.plan().graph;
    std::map<std::pair<int64_t, int>, std::vector<uint8_t>> pool;
    std::vector<uint8_t> buf;
    for (const nn::WeightEntry& e : w.entries()) {
        const gl::Shape s = g.shape(e.id);
        const gl::DType t = g.dtype(e.id);
        const size_t n = size_t(s.numel()), es = gl::dtype_size(t);
        const bool vec = s.nd == 1;
        const bool gain = vec && e.name.find("norm") != std::string::npos && e.name.ends_with(".weight");
        if (vec) {
            buf.assign(n * es, 0);
            for (size_t i = 0; i < n; i++) gl::store_from_f32(buf.data(), t, int64_t(i), gain ? 1.0f : 0.0f);
            rt.write(e.id, buf.data(), t);
            continue;
        }
        const int64_t fan_in = s.numel() / s[0];
        const bool quant = e.scale != gl::kNoValue;
        const gl::DType pt = quant ? gl::DType::f32 : t;
        const size_t ps = gl::dtype_size(pt);
        std::vector<uint8_t>& r = pool[{fan_in, int(pt)}];
        if (r.size() < n * ps) {
            const size_t old = r.size() / ps;
            r.resize(n * ps);
            const float bound = 1.0f / std::sqrt(float(fan_in));
            for (size_t i = old; i < n; i++)
                gl::store_from_f32(r.data(), pt, int64_t(i), bound * (2.0f * gl::rng_uniform(uint64_t(fan_in), i) - 1.0f));
        }
        if (quant) nn::write_weight(w, e, reinterpret_cast<const float*>(r.data()), rt);
        else rt.write(e.id, r.data(), t);
    }
}

}  // namespace bench
