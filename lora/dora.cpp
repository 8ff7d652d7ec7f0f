#include "lora/dora.h"

#include <cmath>
#include <limits>

#include "ggml-lite/ops/builder.h"

namespace lora::dora {

namespace {

constexpr float kEps = std::numeric_limits<float>::epsilon();  // torch.finfo(float32).eps

// v viewed as [groups, D] with the norm taken over D: rows of the weight per output, or per input.
struct Grouping {
    int64_t groups, length;
};
Grouping grouping(const Layer& l, bool on_output) {
    const int64_t inner = l.in * l.k * l.k;
    return on_output ? Grouping{l.out, inner} : Grouping{l.in, l.out * l.k * l.k};
}

// v / |v| per row of v [rows, D] (f32, contiguous), as described in dora.h.
gl::ValueId unit_rows(gl::Graph& g, gl::ValueId v, int64_t d) {
    const gl::ValueId both = gl::concat(g, {v, gl::scale(g, v, -1.0f)}, 1);
    const gl::ValueId ones = gl::fill(g, gl::Shape{2 * d}, 1.0f), zeros = gl::fill(g, gl::Shape{2 * d}, 0.0f);
    // The row's variance is |v|^2 / d: layer_norm gives v sqrt(d) / sqrt(|v|^2 + d eps_ln).
    const float eps = kEps * kEps / float(d);
    const gl::ValueId n = gl::layer_norm(g, both, ones, zeros, eps);
    return gl::scale(g, gl::slice(g, n, 1, 0, d), float(1.0 / std::sqrt(double(d))));
}

}  // namespace

std::vector<int64_t> scale_shape(const Layer& l, bool on_output) {
    const bool four = l.kind != ModuleKind::linear;
    if (on_output) return four ? std::vector<int64_t>{l.out, 1, 1, 1} : std::vector<int64_t>{l.out, 1};
    return four ? std::vector<int64_t>{1, l.in, 1, 1} : std::vector<int64_t>{1, l.in};
}

gl::ValueId weight(gl::Graph& g, gl::ValueId v, gl::ValueId scale, const Layer& l, bool on_output, float multiplier) {
    const gl::Shape shape = g.shape(v);
    const int64_t inner = l.in * l.k * l.k;
    const Grouping gr = grouping(l, on_output);
    gl::ValueId rows;  // [groups, D]: the norm's groups as rows
    if (on_output) {
        rows = gl::reshape(g, v, gl::Shape{l.out, inner});
    } else {
        const gl::ValueId cols = gl::reshape(g, v, gl::Shape{l.out * l.k * l.k, l.in});
        rows = gl::contiguous(g, gl::permute(g, cols, {1, 0}));
    }
    const gl::ValueId r = gl::reshape(g, scale, gl::Shape{gr.groups, 1});
    gl::ValueId w = gl::mul(g, unit_rows(g, rows, gr.length), r);  // v r
    if (multiplier != 1.0f) w = gl::add(g, gl::scale(g, w, multiplier), gl::scale(g, rows, 1.0f - multiplier));
    if (!on_output) w = gl::contiguous(g, gl::permute(g, w, {1, 0}));
    return gl::reshape(g, w, shape);
}

std::vector<float> norms(const std::vector<float>& w, const Layer& l, bool on_output) {
    const Grouping gr = grouping(l, on_output);
    std::vector<double> acc(size_t(gr.groups), 0.0);
    const int64_t inner = l.in * l.k * l.k;
    for (int64_t o = 0; o < l.out; o++)
        for (int64_t j = 0; j < inner; j++) {
            const double x = w[size_t(o * inner + j)];
            acc[size_t(on_output ? o : j % l.in)] += x * x;
        }
    std::vector<float> n(acc.size());
    for (size_t i = 0; i < n.size(); i++) n[i] = float(std::sqrt(acc[i]));
    return n;
}

void apply(std::vector<float>& v, const std::vector<float>& scale, const Layer& l, bool on_output, float multiplier) {
    const std::vector<float> n = norms(v, l, on_output);
    const int64_t inner = l.in * l.k * l.k;
    for (int64_t o = 0; o < l.out; o++)
        for (int64_t j = 0; j < inner; j++) {
            const size_t gidx = size_t(on_output ? o : j % l.in);
            double r = double(scale[gidx]) / (double(n[gidx]) + double(kEps));
            if (multiplier != 1.0f) r = double(multiplier) * (r - 1.0) + 1.0;
            float& x = v[size_t(o * inner + j)];
            x = float(double(x) * r);
        }
}

}  // namespace lora::dora
