// Element types as checkpoint files store them, and the one conversion path from stored bytes
// to a runtime dtype shared by every reader (safetensors, .ckpt). Files hold types the runtime
// has no DType for (f64, i64, bool); they can be listed and read into a compatible target, and
// anything else is refused with an error naming the file and the tensor.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "ggml-lite/core/dtype.h"

namespace gl::io {

enum class StoredType : uint8_t { f64, f32, f16, bf16, i64, i32, i8, u8, boolean };

size_t stored_size(StoredType t);
const char* stored_name(StoredType t);  // safetensors spelling: "F32", "BF16", "BOOL", ...
bool stored_is_float(StoredType t);
// The runtime dtype a tensor of this type is listed as in TensorInfo: itself where the runtime
// has it, else the nearest type it reads into (f64 -> f32, i64 -> i32, bool -> u8).
DType natural_dtype(StoredType t);
StoredType stored_of(DType t);

// Converts n elements read from src (stored type `from`, element e at byte offset
// (offset + e * stride) * stored_size for strided reads) into dst (contiguous, dtype `to`).
// Float to float rounds to nearest even as core/dtype.h does (f64 goes through a round-to-odd
// f32, so f16/bf16 results are rounded once); integer sources go to the same integer type, i64
// to i32 only when every value fits, bool to u8 as 0/1. Any other pairing throws, naming
// `what` ("model.safetensors: tensor 'x'"). src may be unaligned.
void convert_elements(const void* src, StoredType from, void* dst, DType to, int64_t n, const std::string& what);

// Gathers a strided view (sizes/strides in elements, any rank, strides >= 0) whose elements
// start at element `offset` of src, in row-major order, converting as convert_elements does.
// The caller has validated that every index lies inside src.
void gather_elements(const void* src, StoredType from, int64_t offset, const int64_t* sizes, const int64_t* strides,
                     int rank, void* dst, DType to, const std::string& what);

}  // namespace gl::io
