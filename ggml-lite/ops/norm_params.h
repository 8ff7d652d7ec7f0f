// Params of the norm gradient ops beyond their forward op's (group_norm: i[0] groups, i[1] SiLU,
// f[0] eps; layer_norm: f[0] eps), shared by the shape rules, the CPU kernels and the CUDA
// launchers. With i[kNormDxOnly] = 1 (gamma and beta frozen) group_norm_grad and layer_norm_grad
// make dx alone, which may then take a residual (ops/residual.h).
#pragma once
#include "ggml-lite/core/op.h"

namespace gl {

constexpr int kNormDxOnly = 2;

inline bool norm_dx_only(const Params& p) { return p.i[size_t(kNormDxOnly)] != 0; }

}  // namespace gl
