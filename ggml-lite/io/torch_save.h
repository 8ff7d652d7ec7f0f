// Writing a dict of tensors as torch.save does (the zip format of PyTorch >= 1.6), so that
// torch.load(f, weights_only=True) reads it back: what kohya writes for --save_model_as ckpt / pt,
// and A1111 / ComfyUI load LoRAs in. The archive, all entries stored (uncompressed) with their
// data aligned to 64 bytes as torch aligns them:
//   <top>/data.pkl    pickle protocol 2: an OrderedDict of name -> torch._utils._rebuild_tensor_v2
//                     over a persistent storage ('storage', torch.<Type>Storage, key, 'cpu', numel)
//   <top>/byteorder   "little"
//   <top>/data/<key>  each tensor's bytes, one storage per tensor
//   <top>/version     "3\n"
// <top> is the file's stem as torch names it ("archive" when the stem is not plain ASCII). No
// metadata is kept (kohya's ckpt has none). The file is written atomically (io/atomic_file.h);
// archives past zip's 32-bit sizes (4 GiB) or 65535 entries are refused.
#pragma once
#include <string>
#include <vector>

#include "ggml-lite/io/safetensors.h"

namespace gl::io {

// The tensors in the dict's order (names unique; f32, f16, bf16, i32, u8, i8 data, contiguous).
// Throws gl::Error naming the path or the tensor.
void write_torch_checkpoint(const std::string& path, const std::vector<TensorToWrite>& tensors);

}  // namespace gl::io
