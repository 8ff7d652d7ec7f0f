// AdEMAMix8bit against its fp32 step. bitsandbytes' kernels run only on a CUDA GPU, so the 8-bit path
// has no golden trajectory from bitsandbytes here; test_optim.cpp replays the fp32 path (tensors
// under 4096 elements) against make_optim_bnb_golden.py's port of the 32-bit kernel. Checked here: a
// small tensor takes the fp32 step bit for bit, an 8-bit tensor follows the fp32 step within the
// moments' quantisation error (the op cases check the 8-bit step itself exactly, cases_ademamix.cpp),
// and PagedAdEMAMix8bit is AdEMAMix8bit.
#include <doctest/doctest.h>

#include <cmath>

#include "ggml-lite/ops/optim_ademamix.h"
#include "optim8bit_fixtures.h"

using namespace gl;

namespace {

constexpr int64_t kBig = gltest::TwoParamNet::kBig, kSmall = gltest::TwoParamNet::kSmall;
constexpr double kLr = 2e-3;
const std::vector<std::string> kArgs = {"t_alpha=20", "t_beta3=30", "weight_decay=0.01"};

struct Net : gltest::TwoParamNet {
    explicit Net(const std::string& kind) : TwoParamNet(kind, kArgs, kLr) {}
};

// The fp32 step of ops/optim_ademamix.h on the host.
struct Fp32 {
    std::vector<float> p, m1, m2, nu;
    explicit Fp32(int64_t n) : p(Net::start(n)), m1(size_t(n)), m2(size_t(n)), nu(size_t(n)) {}
    void step(int k) {
        const std::vector<float> g = Net::grad(p, k);
        const float h[kHyperSize] = {float(kLr), 0.9f, 0.999f, 1e-8f, 0.01f, float(k + 1), 1.0f, 0.0f};
        const float f[4] = {5.0f, 0.9999f, 20.0f, 30.0f};
        const AdemamixConsts c = ademamix_consts(h, f);
        for (size_t i = 0; i < p.size(); i++) {
            ademamix_moments(c, g[i], m1[i], m2[i], nu[i]);
            p[i] = ademamix_param(c, p[i], m1[i], m2[i], nu[i]);
        }
    }
};

}  // namespace

TEST_CASE("AdEMAMix8bit: the fp32 step's bits under 4096 elements, its trajectory within the quantisation error above") {
    Net q("AdEMAMix8bit"), paged("PagedAdEMAMix8bit");
    Fp32 small(kSmall), big(kBig);
    constexpr int kSteps = 40;
    gltest::Parting part;
    const std::vector<float> s0 = Net::start(kBig);
    for (int k = 0; k < kSteps; k++) {
        q.step(k);
        paged.step(k);
        small.step(k);
        big.step(k);
        CHECK(q.rt->read_f32(q.small) == small.p);
        part.add(q.rt->read_f32(q.big), big.p, s0);
    }
    // Adam-like steps are about lr each; the quantised moments (codes within a few % of the block's
    // absmax near zero) shift a step by a fraction of lr, so the weights part by a few % of the
    // distance travelled at most.
    MESSAGE("AdEMAMix8bit vs fp32, 40 steps: max |difference| of an 8-bit tensor's weights ", part.worst,
            " (the weights moved up to ", part.moved, ")");
    CHECK(part.worst > 0);  // the 8-bit path was taken
    CHECK(part.worst <= 0.05 * part.moved);
    CHECK(q.rt->read_f32(q.big) == paged.rt->read_f32(paged.big));
}
