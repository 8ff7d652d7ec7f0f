// What a CPU kernel sees: its node, its inputs and outputs as strided tensors, and helpers
// that hand out dense f32 views (converting or gathering only when needed).
#pragma once
#include <deque>
#include <vector>

#include "ggml-lite/core/graph.h"
#include "ggml-lite/core/tensor_ref.h"

namespace gl {
namespace dist {
class Communicator;
}

struct CpuCtx {
    explicit CpuCtx(const Node& n) : node(n) {}
    const Node& node;
    std::vector<TensorRef> in, out;
    dist::Communicator* comm = nullptr;  // the runtime's (Runtime::set_communicator)

    const Params& p() const { return node.p; }
    const Shape& in_shape(int i) const { return in[size_t(i)].shape(); }
    const Shape& out_shape(int k) const { return out[size_t(k)].shape(); }
    int n_in() const { return int(in.size()); }

    // Dense f32 copy of input i (the storage itself when it already is dense f32).
    const float* in_f32(int i);
    // Dense i32 input (ids).
    const int32_t* in_i32(int i);
    // Dense f32 buffer for output k; written back in the output's dtype after the kernel.
    float* out_f32(int k);
    // Called by the runtime after the kernel: converts scratch outputs into place.
    void finish();

private:
    std::deque<std::vector<float>> scratch_;
    std::deque<std::vector<int32_t>> iscratch_;
    std::vector<std::pair<int, std::vector<float>*>> pending_;
};

// Gathers any strided tensor into dense f32.
void gather_f32(const TensorRef& t, float* dst);
// Scatters dense f32 into a (possibly strided) tensor of any dtype.
void scatter_f32(const float* src, const TensorRef& t);

}  // namespace gl
