// The problem gemm() solves (layouts documented in gemm.cuh): operands, strides and the fused
// epilogue. Its own header so that the kernels (gemm_kernels.cuh, gemm_sm90.cuh) and the
// dispatcher (gemm.cuh) all include it at their top.
#pragma once
#include <cstdint>

#include "ggml-lite/core/dtype.h"

namespace gl::gemm {

// What happens to the fp32 product before the single rounding to C's dtype. Applied in order:
// alpha scale, + bias[n], + residual[b][m][n]. Future fusions (GEGLU gate, time-embedding bias
// per sample) are new fields here plus a line in apply_epilogue().
struct Epilogue {
    float alpha = 1.0f;
    const void* bias = nullptr;      // [N], C's dtype
    const void* residual = nullptr;  // C's dtype and shape; may alias C exactly
    int64_t ldr = 0, sr = 0;         // its row and batch strides
};

struct GemmArgs {
    DType dtype = DType::bf16;  // of A, B, C, bias and residual
    int64_t M = 0, N = 0, K = 0, batch = 1;
    const void* A = nullptr;
    int64_t lda = 0, sA = 0;
    bool ta = false;
    const void* B = nullptr;
    int64_t ldb = 0, sB = 0;
    bool tb = false;
    void* C = nullptr;
    int64_t ldc = 0, sC = 0;
    Epilogue epi;
};

}  // namespace gl::gemm
