#include "lora/max_norm.h"

#include <algorithm>
#include <cmath>

#include "ggml-lite/core/error.h"

namespace lora {

namespace {

// A^T A of a row-major [rows, r] matrix, or A A^T of an [r, cols] one: r x r, in double.
std::vector<double> gram(const std::vector<float>& a, int64_t r, bool rows_are_rank) {
    const int64_t n = int64_t(a.size()) / r;
    std::vector<double> g(size_t(r * r), 0.0);
    for (int64_t k = 0; k < n; k++)
        for (int64_t i = 0; i < r; i++) {
            const double x = rows_are_rank ? a[size_t(i * n + k)] : a[size_t(k * r + i)];
            if (x == 0.0) continue;
            for (int64_t j = 0; j < r; j++)
                g[size_t(i * r + j)] += x * double(rows_are_rank ? a[size_t(j * n + k)] : a[size_t(k * r + j)]);
        }
    return g;
}

}  // namespace

MaxNormReport apply_max_norm(const LoraNetwork& net, double max_norm, const ReadFn& read, const WriteFn& write) {
    std::vector<const Module*> modules;
    for (const Module& m : net.modules()) modules.push_back(&m);
    return apply_max_norm(modules, max_norm, read, write);
}

MaxNormReport apply_max_norm(const std::vector<const Module*>& modules, double max_norm, const ReadFn& read,
                             const WriteFn& write) {
    GL_CHECK(std::isfinite(max_norm) && max_norm > 0,
             "scale_weight_norms: the max norm must be a finite number > 0, got ", max_norm);
    MaxNormReport rep;
    double sum = 0;
    size_t n = 0;
    for (const Module* mp : modules) {
        const Module& m = *mp;
        const gl::ValueId up_id = m.param("lora_up.weight"), down_id = m.param("lora_down.weight");
        GL_CHECK(up_id != gl::kNoValue && down_id != gl::kNoValue && m.tensors().size() == 2,
                 "scale_weight_norms: ", m.key(),
                 " is not a LoRA module of lora_down and lora_up (kohya's max norm is networks.lora's)");
        const int64_t r = m.rank();
        std::vector<float> up = read(up_id), down = read(down_id);
        const std::vector<double> gu = gram(up, r, false), gd = gram(down, r, true);
        double sq = 0;
        for (size_t i = 0; i < gu.size(); i++) sq += gu[i] * gd[i];
        // kohya computes in the masters' f32: scale = alpha / dim, the norm, the clamp and the ratio.
        const float scale = m.alpha() / float(r);
        const float norm = float(double(scale) * std::sqrt(std::max(sq, 0.0)));
        const float clamped = std::max(norm, float(max_norm / 2));
        const float desired = std::min(clamped, float(max_norm));
        const float ratio = desired / clamped;
        if (ratio != 1.0f) {
            rep.keys_scaled++;
            const float s = std::sqrt(ratio);
            for (float& x : up) x *= s;
            for (float& x : down) x *= s;
            write(up_id, up);
            write(down_id, down);
        }
        const double scaled = double(norm * ratio);
        sum += scaled;
        rep.max_key_norm = n == 0 ? scaled : std::max(rep.max_key_norm, scaled);
        n++;
    }
    rep.average_key_norm = n ? sum / double(n) : 0.0;
    return rep;
}

}  // namespace lora
