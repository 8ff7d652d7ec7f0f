// sm_90a GEMM: wgmma (m64nNk16, fp32 accumulate) reading both operands from shared memory
// through matrix descriptors, 128-byte swizzled tiles filled by cp.async. Included by gemm.cuh.
//   CTA = 2 warpgroups (256 threads), tile 128 x BN x 64; warpgroup w owns rows 64w..64w+63.
//   A: K-major ([m][k], rows of 128 B) or, A_MN, M-major (per 64-wide m atom, [k][m] rows);
//   B: K-major ([n][k]) or, B_MN, N-major (per 64-wide n atom, [k][n] rows) via the wgmma
//   transpose bits. Swizzle: 16-byte chunk c of row r sits at chunk c ^ (r % 8) (1024-B atoms).
//   Pipeline: STAGES slots, loads run STAGES-2 k-tiles ahead; one wgmma group stays in flight
//   (wait_group 1), so a slot is refilled only after every warpgroup waited for its readers.
// Needs the 16-byte path's alignment (vec_ok); M, N, K edges are zero-filled. The body exists
// only in sm_90a code; wgmma_usable() checks that the loaded binary has it.
#pragma once
#include "ggml-lite/cuda/gemm_kernels.cuh"

namespace gl::gemm {

// D (64 x N, fp32, registers) += A (64 x 16) B (16 x N), both from smem descriptors; TA / TB set
// the transpose bits (M- / N-major operand).
template <int N, class T, int TA, int TB> struct Wgmma;
template <int TA, int TB> struct Wgmma<64, __nv_bfloat16, TA, TB> {
    static __device__ __forceinline__ void run(float (&d)[32], uint64_t da, uint64_t db, int scale_d) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, %35, %36;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
            : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));
    }
};
template <int TA, int TB> struct Wgmma<64, __half, TA, TB> {
    static __device__ __forceinline__ void run(float (&d)[32], uint64_t da, uint64_t db, int scale_d) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, %35, %36;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
            : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));
    }
};
template <int TA, int TB> struct Wgmma<128, __nv_bfloat16, TA, TB> {
    static __device__ __forceinline__ void run(float (&d)[64], uint64_t da, uint64_t db, int scale_d) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, %67, %68;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
            : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));
    }
};
template <int TA, int TB> struct Wgmma<128, __half, TA, TB> {
    static __device__ __forceinline__ void run(float (&d)[64], uint64_t da, uint64_t db, int scale_d) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, %67, %68;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
            : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));
    }
};
template <int TA, int TB> struct Wgmma<160, __nv_bfloat16, TA, TB> {
    static __device__ __forceinline__ void run(float (&d)[80], uint64_t da, uint64_t db, int scale_d) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %82, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n160k16.f32.bf16.bf16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79}, %80, %81, p, 1, 1, %83, %84;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79])
            : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));
    }
};
template <int TA, int TB> struct Wgmma<160, __half, TA, TB> {
    static __device__ __forceinline__ void run(float (&d)[80], uint64_t da, uint64_t db, int scale_d) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %82, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n160k16.f32.f16.f16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79}, %80, %81, p, 1, 1, %83, %84;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79])
            : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));
    }
};
template <int TA, int TB> struct Wgmma<256, __nv_bfloat16, TA, TB> {
    static __device__ __forceinline__ void run(float (&d)[128], uint64_t da, uint64_t db, int scale_d) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, %131, %132;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
            : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));
    }
};
template <int TA, int TB> struct Wgmma<256, __half, TA, TB> {
    static __device__ __forceinline__ void run(float (&d)[128], uint64_t da, uint64_t db, int scale_d) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, %131, %132;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
            : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));
    }
};

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Makes this thread's cp.async/st.shared data visible to the async proxy that wgmma reads through.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Keeps the compiler from moving accumulator accesses across wgmma issue/wait points.
__device__ __forceinline__ void pin(float& x) { asm volatile("" : "+f"(x)::"memory"); }

// Shared-memory matrix descriptor, 128-byte swizzle. lbo/sbo in bytes (see the layouts above).
__device__ __forceinline__ uint64_t sw128_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
    return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t((lbo >> 4) & 0x3FFF) << 16) |
           (uint64_t((sbo >> 4) & 0x3FFF) << 32) | (uint64_t(1) << 62);
}

// M-/N-major operand: 64-wide MN atoms LBO apart, 8-row k groups SBO = 1024 B apart (the
// canonical form in CUTLASS's make_gmma_desc; the swapped assignment was tried and is wrong).
__device__ __forceinline__ uint64_t mn_desc(uint32_t addr, uint32_t atom_stride) {
    return sw128_desc(addr, atom_stride, 1024);
}

template <int BN, int STAGES>
struct WgCfg {
    static constexpr int BM = 128, BK = 64, kThreads = 256;
    static constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
    static constexpr int kLds = BN + 8;
    static constexpr int pipe = STAGES * STAGE_BYTES, staged = BM * kLds * 4;
    static constexpr int smem_bytes = (pipe > staged ? pipe : staged) + 1024;  // + alignment slack
    static_assert(BN % 16 == 0 && BN <= 256 && STAGES >= 3, "wgmma tile");
};

template <class T, int BN, int STAGES, bool A_MN, bool B_MN>
__global__ void __launch_bounds__(256, (WgCfg<BN, STAGES>::smem_bytes * 2 <= 227 * 1024 ? 2 : 1))
    wgmma_gemm_kernel(MmaParams p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using Cfg = WgCfg<BN, STAGES>;
    constexpr int BM = Cfg::BM, BK = Cfg::BK, NTH = Cfg::kThreads;
    static_assert(!B_MN || BN % 64 == 0, "N-major B needs whole 64-wide atoms");
    extern __shared__ unsigned char smem_dyn[];
    unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_dyn) + 1023) & ~uintptr_t(1023));
    const uint32_t sbase = smem_u32(smem);
    const int tid = threadIdx.x, wg = tid >> 7;
    const int m0 = (blockIdx.x / p.tiles_n) * BM, n0 = (blockIdx.x % p.tiles_n) * BN;
    const int64_t bz = int64_t(blockIdx.z) + p.batch0;
    const T* A = static_cast<const T*>(p.A) + bz * p.sA;
    const T* B = static_cast<const T*>(p.B) + bz * p.sB;
    const int kbeg = blockIdx.y * p.k_per_split;
    const int kend = max(0, min(p.K, kbeg + p.k_per_split) - kbeg);  // relative to kbeg
    // written out: through ceil_div the compiler no longer uses kend >= 0 (a signed division)
    const int ktiles = (kend + BK - 1) / BK;

    auto load_stage = [&](int slot, int kt) {
        const int kr = kt * BK;  // relative to kbeg
        const uint32_t sa = sbase + slot * Cfg::STAGE_BYTES, sb = sa + Cfg::A_BYTES;
        if constexpr (!A_MN) {
#pragma unroll
            for (int it = 0; it < BM * 8 / NTH; it++) {
                const int i = tid + it * NTH, r = i >> 3, c = i & 7;
                const bool ok = m0 + r < p.M && kr + c * 8 < kend;
                const T* g = A + int64_t(m0 + r) * p.lda + kbeg + kr + c * 8;
                cp_async<16>(sa + r * 128 + ((c ^ (r & 7)) << 4), ok ? g : A, ok ? 16 : 0);
            }
        } else {
#pragma unroll
            for (int it = 0; it < BK * (BM / 8) / NTH; it++) {
                const int i = tid + it * NTH, k = i / (BM / 8), cc = i % (BM / 8), c = cc & 7;
                const bool ok = kr + k < kend && m0 + cc * 8 < p.M;
                const T* g = A + int64_t(kbeg + kr + k) * p.lda + m0 + cc * 8;
                cp_async<16>(sa + (cc >> 3) * (BK * 128) + k * 128 + ((c ^ (k & 7)) << 4), ok ? g : A, ok ? 16 : 0);
            }
        }
        if constexpr (!B_MN) {
#pragma unroll
            for (int it = 0; it < ceil_div(BN * 8, NTH); it++) {
                const int i = tid + it * NTH, r = i >> 3, c = i & 7;
                if ((BN * 8) % NTH != 0 && i >= BN * 8) break;
                const bool ok = n0 + r < p.N && kr + c * 8 < kend;
                const T* g = B + int64_t(n0 + r) * p.ldb + kbeg + kr + c * 8;
                cp_async<16>(sb + r * 128 + ((c ^ (r & 7)) << 4), ok ? g : B, ok ? 16 : 0);
            }
        } else {
#pragma unroll
            for (int it = 0; it < BK * (BN / 8) / NTH; it++) {
                const int i = tid + it * NTH, k = i / (BN / 8), cc = i % (BN / 8), c = cc & 7;
                const bool ok = kr + k < kend && n0 + cc * 8 < p.N;
                const T* g = B + int64_t(kbeg + kr + k) * p.ldb + n0 + cc * 8;
                cp_async<16>(sb + (cc >> 3) * (BK * 128) + k * 128 + ((c ^ (k & 7)) << 4), ok ? g : B, ok ? 16 : 0);
            }
        }
    };

    float acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; i++) acc[i] = 0.0f;

#pragma unroll
    for (int s = 0; s < STAGES - 2; s++) {
        if (s < ktiles) load_stage(s, s);
        cp_async_commit();
    }
    for (int kt = 0; kt < ktiles; kt++) {
        cp_async_wait<STAGES - 3>();
        fence_proxy_async();
        __syncthreads();  // k-tile kt is in smem for all; wgmma(kt-2) of both warpgroups retired
        {
            const int nk = kt + STAGES - 2;
            if (nk < ktiles) load_stage(nk % STAGES, nk);
            cp_async_commit();
        }
        const uint32_t sa = sbase + (kt % STAGES) * Cfg::STAGE_BYTES, sb = sa + Cfg::A_BYTES;
#pragma unroll
        for (int i = 0; i < BN / 2; i++) pin(acc[i]);
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < BK / 16; ks++) {
            // K-major: the k16 step moves 32 B along the swizzled 128-B row. MN-major: 16 k rows.
            const uint64_t da = A_MN ? mn_desc(sa + wg * (BK * 128) + ks * 2048, BK * 128)
                                     : sw128_desc(sa + wg * (64 * 128) + ks * 32, 16, 1024);
            const uint64_t db = B_MN ? mn_desc(sb + ks * 2048, BK * 128) : sw128_desc(sb + ks * 32, 16, 1024);
            Wgmma<BN, T, A_MN ? 1 : 0, B_MN ? 1 : 0>::run(acc, da, db, 1);
        }
        wgmma_commit();
        wgmma_wait<1>();
#pragma unroll
        for (int i = 0; i < BN / 2; i++) pin(acc[i]);
    }
    wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < BN / 2; i++) pin(acc[i]);
    cp_async_wait<0>();
    __syncthreads();  // pipeline smem becomes the epilogue tile

    float* stage = reinterpret_cast<float*>(smem);
    const int lane = tid & 31, w4 = (tid >> 5) & 3, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int j = 0; j < BN / 8; j++) {
        const int r = wg * 64 + w4 * 16 + g, c = j * 8 + 2 * t;
        *reinterpret_cast<float2*>(stage + r * Cfg::kLds + c) = make_float2(acc[4 * j], acc[4 * j + 1]);
        *reinterpret_cast<float2*>(stage + (r + 8) * Cfg::kLds + c) = make_float2(acc[4 * j + 2], acc[4 * j + 3]);
    }
    __syncthreads();
    store_staged<T, BN, NTH, true>(stage, Cfg::kLds, BM, m0, n0, p, bz);
#else
    __trap();  // not built for sm_90a; wgmma_usable() keeps the dispatcher away
#endif
}

// Whether this binary carries the sm_90a body and the current device can run it.
inline bool wgmma_usable() {
    static thread_local int cached_dev = -1;
    static thread_local bool ok = false;
    int dev = 0;
    GL_CUDA_CHECK(cudaGetDevice(&dev));
    if (dev != cached_dev) {
        int major = 0;
        GL_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
        cudaFuncAttributes fa{};
        ok = major == 9 &&
             cudaFuncGetAttributes(&fa, wgmma_gemm_kernel<__nv_bfloat16, 128, 3, false, true>) == cudaSuccess &&
             fa.binaryVersion == 90;
        cudaGetLastError();
        cached_dev = dev;
    }
    return ok;
}

template <class T, int BN, int STAGES, bool A_MN, bool B_MN>
void launch_wgmma(const GemmArgs& a, int splits, float* partial, cudaStream_t s) {
    using Cfg = WgCfg<BN, STAGES>;
    auto kern = wgmma_gemm_kernel<T, BN, STAGES, A_MN, B_MN>;
    static thread_local uint64_t smem_set = 0;
    allow_smem(reinterpret_cast<const void*>(kern), Cfg::smem_bytes, smem_set);
    MmaParams p = params_of(a);
    p.tiles_n = int(ceil_div(a.N, BN));
    const int64_t tiles = ceil_div(a.M, Cfg::BM) * p.tiles_n;
    int kps = int(ceil_div(a.K, splits));
    kps = ceil_div(kps, Cfg::BK) * Cfg::BK;
    const int ysplits = splits > 1 && kps > 0 ? int(ceil_div(a.K, kps)) : 1;
    p.k_per_split = ysplits > 1 ? kps : int(a.K > 0 ? a.K : 1);
    p.partial = ysplits > 1 ? partial : nullptr;
    for (int64_t b0 = 0; b0 < a.batch; b0 += 65535) {
        p.batch0 = int(b0);
        const unsigned nz = unsigned(a.batch - b0 < 65535 ? a.batch - b0 : 65535);
        kern<<<dim3(unsigned(tiles), unsigned(ysplits), nz), Cfg::kThreads, Cfg::smem_bytes, s>>>(p);
        GL_CUDA_LAUNCHED();
    }
    if (ysplits > 1) launch_splitk_reduce<T>(a, ysplits, partial, s);
}

}  // namespace gl::gemm
