// What bench_step and bench_presets share: random frozen weights written quickly, random inputs,
// the median of timings. Header-only (the bench programs are single files).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ggml-lite/core/runtime.h"
#include "ggml-lite/ops/rng.h"
#include "models/diffusion/noise.h"
#include "models/nn/weights.h"

namespace bench {

inline double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// Random frozen weights in the leaf's dtype, quickly: PyTorch-default-like uniform(-1/sqrt(fan_in),
// 1/sqrt(fan_in)) for matrices and convs, ones for norm gains, zeros for biases. One buffer per
// (fan_in, dtype) is drawn once (counter-based, so it is cheap) and reused for every tensor, and
// for every runtime written by the same RandomWeights (bench_presets runs a score of step graphs).
// A quantized matrix is drawn in f32 and quantized per row, so every store format holds the same
// values up to its rounding.
class RandomWeights {
public:
    void write(const nn::Weights& w, gl::Runtime& rt) {
        const gl::Graph& g = rt.plan().graph;
        for (const nn::WeightEntry& e : w.entries()) {
            const gl::Shape s = g.shape(e.id);
            const gl::DType t = g.dtype(e.id);
            const size_t n = size_t(s.numel());
            if (s.nd == 1) {
                const bool gain = e.name.find("norm") != std::string::npos && e.name.ends_with(".weight");
                rt.write(e.id, draw(gain ? -1 : 0, t, n).data(), t);
            } else if (e.scale != gl::kNoValue) {  // an 8-bit matrix: drawn in f32, quantized per row
                nn::write_weight(w, e, reinterpret_cast<const float*>(draw(s.numel() / s[0], gl::DType::f32, n).data()),
                                 rt);
            } else {
                rt.write(e.id, draw(s.numel() / s[0], t, n).data(), t);
            }
        }
    }

private:
    // At least n values of dtype t: fan_in > 0 uniform in +-1/sqrt(fan_in), 0 zeros, -1 ones.
    const std::vector<uint8_t>& draw(int64_t fan_in, gl::DType t, size_t n) {
        const size_t es = gl::dtype_size(t);
        std::vector<uint8_t>& r = pool_[{fan_in, int(t)}];
        if (r.size() < n * es) {
            const size_t old = r.size() / es;
            r.resize(n * es);
            const float bound = fan_in > 0 ? 1.0f / std::sqrt(float(fan_in)) : 0.0f;
            for (size_t i = old; i < n; i++)
                gl::store_from_f32(r.data(), t, int64_t(i),
                                   fan_in > 0 ? bound * (2.0f * gl::rng_uniform(uint64_t(fan_in), i) - 1.0f)
                                              : fan_in < 0 ? 1.0f : 0.0f);
        }
        return r;
    }
    std::map<std::pair<int64_t, int>, std::vector<uint8_t>> pool_;
};

inline void write_random_weights(const nn::Weights& w, gl::Runtime& rt) { RandomWeights().write(w, rt); }

inline std::vector<float> randn(size_t n, uint64_t seed) {
    diffusion::NoiseRng rng{seed, 0};
    std::vector<float> v(n);
    diffusion::fill_normal(v, rng);
    return v;
}

}  // namespace bench
