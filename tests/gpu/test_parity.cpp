// GPU parity: every op-list case runs on the CUDA backend and on the CPU reference from the
// same inputs, the GPU arenas poisoned first; forward outputs and every gradient must agree.
// f32 graphs must match to ~1e-5 relative, bf16 graphs to ~1e-2.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <set>

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/planner.h"
#include "../op_harness.h"

using namespace gl;
using namespace gltest;

namespace {

struct Compared {
    double worst = 0;
    std::string where;
};

// Runs one case on both backends; returns the worst relative error over outputs and grads.
Compared run_parity(const OpCase& c, DType compute) {
    auto bc = build_case(c, !c.reference, compute);
    Plan plan = make_plan(bc->b.g);
    auto cpu = make_cpu_runtime(plan);
    auto gpu = make_cuda_runtime(plan);
    bind_leaves(*cpu, bc->b);
    cpu->run();
    gpu->poison(0xff);  // NaN in every float dtype
    bind_leaves(*gpu, bc->b);
    gpu->run();

    std::vector<ValueId> checked = bc->b.outs;
    for (ValueId p : bc->params)
        if (bc->grads[p] != kNoValue) checked.push_back(bc->grads[p]);
    Compared r;
    for (ValueId v : checked) {
        if (!dtype_is_float(bc->b.g.dtype(v))) {
            CHECK_MESSAGE(cpu->read_f32(v) == gpu->read_f32(v), c.op, "/", c.label, ": ", bc->b.g.describe(v), " differs");
            continue;
        }
        auto want = cpu->read_f32(v), got = gpu->read_f32(v);
        // Non-finite values must match exactly (an f16 overflow is inf on both); a NaN where the
        // reference has a number is an unwritten (poisoned) or broken element.
        bool same_specials = true;
        for (size_t i = 0; i < got.size(); i++) {
            if (std::isfinite(want[i]) && std::isfinite(got[i])) continue;
            bool both_nan = std::isnan(want[i]) && std::isnan(got[i]);
            same_specials = same_specials && (both_nan || want[i] == got[i]);
            want[i] = got[i] = 0.0f;  // compared here; leave the rest to rel_err
        }
        double e = same_specials ? rel_err(got, want, 1e-6) : INFINITY;
        if (e > r.worst) {
            r.worst = e;
            r.where = bc->b.g.describe(v);
        }
    }
    return r;
}

}  // namespace

TEST_CASE("every op in the op list has a CUDA kernel and is covered by a parity case") {
    std::set<std::string> covered;
    for (const OpCase& c : registry()) {
        auto bc = build_case(c, !c.reference);
        for (const Node& n : bc->b.g.nodes) covered.insert(op_name(n.op));
    }
    for (int i = 0; i < kOpCount; i++) {
        const OpDef& def = op_def(Op(i));
        CHECK_MESSAGE(covered.count(def.name), "op ", def.name, " is never run by a parity case");
    }
}

TEST_CASE("GPU parity with the CPU reference: f32 and bf16") {
    for (const OpCase& c : registry()) {
        for (DType t : {DType::f32, DType::bf16}) {
            SUBCASE((c.op + "/" + c.label + "/" + dtype_name(t)).c_str()) {
                if (t != DType::f32 && c.reference) continue;  // reference cases pin their dtypes
                Compared r;
                try {
                    r = run_parity(c, t);
                } catch (const gl::Error& e) {
                    FAIL(c.op, "/", c.label, "/", dtype_name(t), ": ", e.what());
                }
                double tol = t == DType::f32 ? 2e-5 : 2e-2;
                CHECK_MESSAGE(r.worst <= tol, c.op, "/", c.label, "/", dtype_name(t), ": ", r.where,
                              " relative error ", r.worst);
            }
        }
    }
}
