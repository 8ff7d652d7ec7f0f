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
    DType dtype = DType::bf16;  // of A, B (unless quantized), C, bias and residual
    int64_t M = 0, N = 0, K = 0, batch = 1;
    const void* A = nullptr;
    int64_t lda = 0, sA = 0;
    bool ta = false;
    const void* B = nullptr;
    int64_t ldb = 0, sB = 0;
    bool tb = false;
    // A quantized B (a frozen weight, core/quant.h): B holds 8-bit codes of dtype b_codes (i8 or
    // f8e4m3) and b_scale one f32 per stored row of B (its N rows when tb, its K rows otherwise);
    // B's element is code * scale, rounded once to `dtype` as it is loaded. Takes ta = false and
    // sB = 0. b_quant is set when planning too, before any pointer exists.
    bool b_quant = false;
    DType b_codes = DType::i8;
    const float* b_scale = nullptr;
    void* C = nullptr;
    int64_t ldc = 0, sC = 0;
    Epilogue epi;
    // A second pair (K2 > 0): C = A B + A2 B2 (+ epilogue), A2 / B2 laid out as A / B (ta, tb) with
    // K2 for K.
    const void* A2 = nullptr;
    int64_t lda2 = 0, sA2 = 0;
    const void* B2 = nullptr;
    int64_t ldb2 = 0, sB2 = 0;
    int64_t K2 = 0;
};

}  // namespace gl::gemm
