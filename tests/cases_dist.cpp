// Op cases: all_reduce with no communicator bound (a world of one: y_k = weight * x_k). Sums over
// several ranks are tested with real communicators in tests/test_dist_*.cpp.
#include "tests/op_cases.h"

namespace gltest {
namespace {

// in[0]: the weight, then the N tensors, then the harness' N projections; y_k = w * x_k in f32.
std::vector<std::vector<float>> all_reduce_reference(const std::vector<std::vector<float>>& in) {
    std::vector<std::vector<float>> out;
    const size_t n = (in.size() - 1) / 2;
    for (size_t k = 1; k <= n; k++) {
        std::vector<float> y = in[k];
        for (float& e : y) e *= in[0][0];
        out.push_back(y);
    }
    return out;
}

void build_all_reduce(CaseBuilder& b, const std::vector<int64_t>& sizes) {
    const ValueId w = b.kept("weight", {1}, 0.0f, 1.0f, DType::f32);
    b.set(w, {0.375f});
    std::vector<ValueId> xs;
    for (size_t k = 0; k < sizes.size(); k++)
        xs.push_back(b.kept("x" + std::to_string(k), {sizes[k]}, -2.0f, 2.0f, DType::f32));
    for (ValueId y : all_reduce(b.g, xs, w)) b.out(y);
}

Register r({
    {"all_reduce", "three tensors, one of 5000 elements, weight 0.375",
     [](CaseBuilder& b) { build_all_reduce(b, {5000, 21, 1}); },
     [](Graph& g) { all_reduce(g, {g.input("x", DType::bf16, {4})}, g.input("w", DType::f32, {1})); },
     all_reduce_reference, 1e-6},
    {"all_reduce", "600 tensors in one node (more than one CUDA launch table)",
     [](CaseBuilder& b) { build_all_reduce(b, std::vector<int64_t>(600, 3)); },
     [](Graph& g) { all_reduce(g, {g.input("x", DType::f32, {4})}, g.input("w", DType::f32, {2})); },
     all_reduce_reference, 1e-6},
});

}  // namespace
}  // namespace gltest
