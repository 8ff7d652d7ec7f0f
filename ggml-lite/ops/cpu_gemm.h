// The CPU GEMM block shared by the matmul and conv families (defined in ops/matmul.cpp).
// Callers pack kGemmRows rows of A for up to kGemmDepth values of k, get float partial sums,
// and fold them into their own double accumulators: every output element is then summed in
// a fixed order that does not depend on how the work is split over threads.
#pragma once
#include <cstdint>

namespace gl {

constexpr int64_t kGemmRows = 4;    // rows of A per block
constexpr int64_t kGemmDepth = 64;  // the most k values one block sums in float

// part[r * ldp + j] = sum over k < depth, in k order, of a_blk[k * kGemmRows + r] * b[k * ldb + j],
// for r < kGemmRows and j < nc. Rows of a_blk a caller does not use should hold zeros.
void gemm_block(const float* a_blk, const float* b, int64_t ldb, int64_t depth, int64_t nc, float* part, int64_t ldp);

}  // namespace gl
