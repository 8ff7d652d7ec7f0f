// all_reduce: {weight, x_0 .. x_{N-1}} -> {y_0 .. y_{N-1}}, y_k = sum over ranks of weight * x_k.
// The data-parallel step's gradient reduction (train/update.h): each rank weights its gradients
// by its share of the global batch, and the sum is the global batch's mean. The product is rounded
// to f32 before the sum, and the communicator adds the ranks in rank order, so every rank gets the
// same bits. CPU: the outputs are packed into one host buffer for one collective.
#include "ggml-lite/dist/communicator.h"
#include "ggml-lite/ops/family.h"

namespace gl {

static std::vector<OutSpec> all_reduce_infer(const OpCall& c) {
    c.check(c.n_in() >= 2, "takes a weight and at least one tensor");
    c.check(c.dtype(0) == DType::f32 && c.shape(0).numel() == 1, "input 0 (the weight) must be f32 with one element");
    std::vector<OutSpec> out;
    for (int k = 1; k < c.n_in(); k++) {
        c.check(c.dtype(k) == DType::f32, "tensors must be f32 (input ", k, ")");
        out.push_back(dense(DType::f32, c.shape(k)));
    }
    return out;
}
static Cost all_reduce_cost(const OpCall& c) {
    double bytes = 0;
    for (int k = 1; k < c.n_in(); k++) bytes += 8.0 * double(c.shape(k).numel());
    return {0, bytes};
}
static void all_reduce_cpu(CpuCtx& c) {
    const float w = c.in_f32(0)[0];
    const int n = c.n_in() - 1;
    size_t total = 0;
    for (int k = 0; k < n; k++) total += size_t(c.out[size_t(k)].numel());
    std::vector<float> packed(total);
    size_t at = 0;
    for (int k = 0; k < n; k++) {
        const float* x = c.in_f32(k + 1);
        const size_t m = size_t(c.out[size_t(k)].numel());
        for (size_t i = 0; i < m; i++) packed[at + i] = w * x[i];
        at += m;
    }
    if (c.comm && c.comm->world_size() > 1) {
        GL_CHECK(!c.comm->device_buffers(), "all_reduce: the ", c.comm->name(),
                 " communicator sums device memory; the CPU backend needs a host one (--dist_backend tcp)");
        c.comm->all_reduce_sum(packed.data(), total);
    }
    at = 0;
    for (int k = 0; k < n; k++) {
        const size_t m = size_t(c.out[size_t(k)].numel());
        std::memcpy(c.out_f32(k), packed.data() + at, m * sizeof(float));
        at += m;
    }
}

std::vector<ValueId> all_reduce(Graph& g, const std::vector<ValueId>& xs, ValueId weight) {
    std::vector<ValueId> in{weight};
    in.insert(in.end(), xs.begin(), xs.end());
    return g.apply(Op::all_reduce, in, Params{});
}

const OpDef def_all_reduce{"all_reduce", "dist", all_reduce_infer, all_reduce_cost, nullptr, all_reduce_cpu,
                           kOpNoGrad};

}  // namespace gl
