// Random draws: normal_noise against the host's generator (diffusion::NoiseRng with the platform's libm,
// then train::apply_noise_offset), element for element: the draws train::draw_micro_batch makes.
#include <bit>

#include "ggml-lite/ops/rng_normal.h"
#include "models/diffusion/noise.h"
#include "op_cases.h"
#include "train/objective.h"

namespace gltest {
namespace {

using namespace gl;

// The draw tensor's contents as the harness writes them (floats holding exact integers): a seed
// with both halves set, a position, and an offset whose bits survive the float (0.125: low half 0).
std::vector<float> draw_values(uint64_t seed, uint64_t counter, double offset, int extra) {
    std::vector<int32_t> d(size_t(kNoiseDrawSize + extra), 3);
    noise_draw_set(d.data(), kNdSeed, seed);
    noise_draw_set(d.data(), kNdCounter, counter);
    noise_draw_set(d.data(), kNdOffset, std::bit_cast<uint64_t>(offset));
    std::vector<float> f;
    for (int32_t v : d) f.push_back(float(v));
    return f;
}

uint64_t u64(const std::vector<float>& d, int slot) {
    return uint64_t(uint32_t(int32_t(d[size_t(slot)]))) | uint64_t(uint32_t(int32_t(d[size_t(slot + 1)]))) << 32;
}

std::vector<std::vector<float>> host_noise(const std::vector<std::vector<float>>& in, const Shape& s) {
    diffusion::NoiseRng rng{u64(in[0], kNdSeed), u64(in[0], kNdCounter)};
    std::vector<float> z(size_t(s.numel()));
    diffusion::fill_normal(z, rng);
    const double offset = std::bit_cast<double>(u64(in[0], kNdOffset));
    if (offset != 0.0) train::apply_noise_offset(z, s.d[0], s.last(), offset, rng);
    return {z};
}

void build_noise(CaseBuilder& b, const Shape& s, double offset) {
    ValueId d = b.ids("draw", {kNoiseDrawSize + 2}, 1);
    b.set(d, draw_values((uint64_t(5) << 32) + 77, 1000, offset, 2));
    b.out(normal_noise(b.g, d, s));
}

Register r({
    {"normal_noise", "N(0, 1) from a seed and position held on the device",
     [](CaseBuilder& b) { build_noise(b, {3, 5, 7}, 0.0); },
     [](Graph& g) { normal_noise(g, g.input("draw", DType::i32, {kNoiseDrawSize - 1}), {4}); },
     [](const std::vector<std::vector<float>>& in) { return host_noise(in, {3, 5, 7}); }, 0.0},
    {"normal_noise", "with offset noise per sample and channel (NHWC)",
     [](CaseBuilder& b) { build_noise(b, {2, 3, 3, 4}, 0.125); },
     [](Graph& g) { normal_noise(g, g.input("draw", DType::f32, {kNoiseDrawSize}), {4}); },
     [](const std::vector<std::vector<float>>& in) { return host_noise(in, {2, 3, 3, 4}); }, 0.0},
});

}  // namespace
}  // namespace gltest
