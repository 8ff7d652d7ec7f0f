// Lion8bit against Lion. bitsandbytes' Lion8bit runs only on a CUDA GPU, so there is no golden
// trajectory from it here; what is checked instead is what makes it bitsandbytes' step: tensors
// under 4096 elements take the fp32 Lion step bit for bit (bitsandbytes' 32-bit Lion kernel is
// lion_pytorch's update, whose golden trajectory test_optim.cpp checks), an 8-bit tensor follows fp32
// Lion within the momentum's quantisation error (the op cases check the 8-bit step itself exactly,
// cases_lion8bit.cpp), every code survives a dequantise / quantise round trip, and a moment never
// changes sign in its code.
#include <doctest/doctest.h>

#include <cmath>

#include "ggml-lite/ops/adam8bit_codes.h"
#include "ggml-lite/ops/optim_types.h"
#include "optim8bit_fixtures.h"

using namespace gl;

namespace {

struct LionNet : gltest::TwoParamNet {
    explicit LionNet(const std::string& kind) : TwoParamNet(kind, {"weight_decay=0.1"}, 1e-3) {}
};

}  // namespace

TEST_CASE("Lion8bit: fp32 Lion's bits under 4096 elements, fp32 Lion's trajectory within the quantisation error above") {
    LionNet q("Lion8bit"), f("Lion"), paged("PagedLion8bit");
    constexpr int kSteps = 40;
    double worst = 0;
    for (int k = 0; k < kSteps; k++) {
        q.step(k);
        f.step(k);
        paged.step(k);
        CHECK(q.rt->read_f32(q.small) == f.rt->read_f32(f.small));
        const std::vector<float> a = q.rt->read_f32(q.big), b = f.rt->read_f32(f.big);
        for (size_t i = 0; i < a.size(); i++) worst = std::max(worst, std::fabs(double(a[i]) - b[i]));
    }
    // Every step moves a weight by lr = 1e-3 (the sign) plus its decay; a quantised momentum flips
    // a sign only where the interpolation is within the code spacing of 0, so the trajectories part
    // by a few steps' worth at most. We measure 6e-3 (6 flipped steps) at the worst element over 40.
    MESSAGE("Lion8bit vs Lion, 40 steps: max |difference| of an 8-bit tensor's weights ", worst);
    CHECK(worst > 0);  // the 8-bit path was taken
    CHECK(worst <= 1e-2);
    CHECK(q.rt->read_f32(q.big) == paged.rt->read_f32(paged.big));  // PagedLion8bit is Lion8bit
}

TEST_CASE("Lion8bit codes: every code survives a round trip, and a moment keeps its sign") {
    const float* qs = adam8bit_qmap(true);
    for (float absmax : {1e-3f, 0.37f, 5.0f}) {
        CAPTURE(absmax);
        const float inv = adam8bit_inverse(absmax);
        for (int c = 0; c < 256; c++) CHECK(lion8bit_code(qs, qs[c] * absmax, absmax, inv) == c);
    }
    const int zero = adam8bit_quantize(qs, 0.0f);
    CHECK(qs[zero] == 0.0f);
    CHECK(lion8bit_code(qs, 0.0f, 1.0f, 1.0f) == zero);
    for (float m : {1e-9f, 1e-7f, 3e-4f, 0.02f, 0.7f}) {
        CAPTURE(m);
        const int up = lion8bit_code(qs, m, 1.0f, 1.0f), down = lion8bit_code(qs, -m, 1.0f, 1.0f);
        CHECK(qs[up] >= 0.0f);  // the nearest code may be 0 from above
        CHECK(qs[down] < 0.0f);  // never from below: bitsandbytes moves it one code down
        CHECK((m > 1e-6f || down == zero - 1));
    }
}
