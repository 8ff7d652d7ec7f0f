// Merging a LoRA file into an SD1.5 checkpoint and writing the merged checkpoint (gl-merge).
//
// The base is opened with sd::open_sd15* (an original single file, .safetensors or .ckpt, or a
// diffusers folder); the LoRA file in any format load_lora reads (kohya, LDM-named kohya,
// diffusers, PEFT; LoCon's 3x3 convs too). The network is rebuilt on the base's UNet / text
// encoder with the file's rank (and conv rank), the file is loaded into it (its alphas folded), and
// W += multiplier * (alpha / rank) * up @ down is applied in f32 to every targeted weight (lora::
// merge_into). The output keeps the base's layout, key names and each tensor's dtype; tensors the
// LoRA does not touch are copied unchanged.
// - single file -> `out` is one .safetensors file (a .ckpt base is converted on the way);
// - diffusers folder -> `out` is a new folder: a copy of the base folder whose UNet and text encoder
//   weight files hold the merged weights (their safetensors files are required).
// The base is never written, and `out` is never the base (lora/merge_output.h has the rules); an
// existing `out` is replaced only with `overwrite`. Nothing appears under `out` until the merge is
// complete; the temporaries on the way carry the process id, and those of a killed merge to the
// same `out` are removed when the next one starts. Merged weights that are not finite (a NaN in
// the base, a multiplier so large that the delta overflows) are refused, naming the tensor.
// Host memory: the UNet and text encoder in f32 (about 3.9 GB at SD1.5 size) plus one model file.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "ggml-lite/io/tensor_source.h"
#include "lora/kohya.h"
#include "models/sd15/model_files.h"

namespace lora {

struct MergeOptions {
    float multiplier = 1.0f;  // the LoRA's strength, as A1111's <lora:name:multiplier>; finite
    bool overwrite = false;   // replace an existing `out` (never the base itself)
};

struct MergeReport {
    LoraFormat format = LoraFormat::kohya;
    int rank = 0, conv_rank = 0;    // read from the file (conv_rank 0: no LoCon 3x3 modules)
    size_t unet_modules = 0;        // weights changed
    size_t text_encoder_modules = 0;
    size_t tensors_written = 0;     // in the merged file(s)
    std::vector<std::string> stale_removed;  // temporaries of killed merges to `out`, removed
};

// The file's rank (Linear / 1x1 modules) and conv rank (3x3 LoCon modules, 0 when none), from the
// down matrices of every format load_lora reads, with the tensor each was read from. Throws
// gl::Error naming the tensor for a rank outside [1, 2^31 - 1] or mixed ranks within one kind (a
// network has one rank per kind), and for a file without down matrices.
struct FileRanks {
    int rank = 0, conv_rank = 0;
    std::string rank_tensor, conv_tensor;  // "name [shape]"
};
FileRanks file_rank_info(const gl::io::TensorSource& f);
std::pair<int, int> file_ranks(const gl::io::TensorSource& f);

// Throws gl::Error naming the file and what is wrong: a LoRA file whose tensors the network does
// not use (merging would drop them silently), mixed ranks, non-finite weights, an output path the
// rules refuse, too little free space, or a base whose format cannot be written back.
MergeReport merge_lora_into_checkpoint(const sd::Sd15Files& base, const std::string& base_path,
                                       const gl::io::TensorSource& lora_file, const std::string& out,
                                       const MergeOptions& opt = {});

}  // namespace lora
