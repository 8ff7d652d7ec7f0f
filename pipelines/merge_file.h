// Merging a LoRA file into a checkpoint of a model family (SD1.x, SD2.x) and writing the merged
// checkpoint (gl-merge).
//
// The base is opened by its family (models::Family::open: an original single file, .safetensors
// or .ckpt, or a diffusers folder); the LoRA file in any format load_lora reads (kohya, LDM-named kohya,
// diffusers, PEFT; LoCon's 3x3 convs, LyCORIS's LoHa, LoKr and DoRA too). The network is rebuilt
// on the base's UNet / text encoder with the modules the file holds (lora/file_modules.h), the file
// is loaded into it, and each module's update is applied in f32 to its weight (lora::merge_into:
// W += multiplier * dW, or DoRA's decomposition) — the weight LyCORIS's forward applies, not its
// own merge (which scales LoHa's and LoKr's update twice). The output keeps the base's layout, key
// names and each tensor's dtype; tensors the LoRA does not touch are copied unchanged. A weight the
// file stores as a part of a tensor (SD2.x's single file: the text encoder's q, k and v joined in
// OpenCLIP's in_proj_weight) is written back into its rows of that tensor, the rest kept.
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
#include <memory>
#include <string>
#include <vector>

#include "ggml-lite/io/tensor_source.h"
#include "lora/file_modules.h"
#include "lora/kohya.h"
#include "lora/lora.h"
#include "models/model_files.h"

namespace lora {

struct MergeOptions {
    float multiplier = 1.0f;  // the LoRA's strength, as A1111's <lora:name:multiplier>; finite
    bool overwrite = false;   // replace an existing `out` (never the base itself)
};

struct MergeReport {
    LoraFormat format = LoraFormat::kohya;
    std::string types;              // the file's network types: "LoRA", "LoHa", "LoKr DoRA", ...
    int rank = 0, conv_rank = 0;    // the largest of its Linear / 1x1 and of its k x k modules (0: none)
    size_t unet_modules = 0;        // weights changed
    size_t text_encoder_modules = 0;
    size_t tensors_written = 0;     // in the merged file(s)
    std::vector<std::string> stale_removed;  // temporaries of killed merges to `out`, removed
};

// The base's UNet and text encoder built on tiny inputs in one graph (only their layers matter:
// nothing is allocated) with a network of the file's modules on them, at `multiplier`.
struct FileNetwork {
    gl::Graph g;
    std::unique_ptr<nn::Weights> unet, text_encoder;
    std::unique_ptr<LoraNetwork> net;
};
std::unique_ptr<FileNetwork> file_network(const models::ModelFiles& base, std::shared_ptr<const FileModules> modules,
                                          float multiplier);

// The key the base's part weights (ModelFiles::unet, ::text_encoder) hold an internal weight name
// of a part under ("" when none): the family's weight_key.
std::string checkpoint_key(const models::ModelFiles& base, Part part, const std::string& name);

// Throws gl::Error naming the file and what is wrong: a LoRA file whose tensors the network does
// not use (merging would drop them silently), ranks out of range, non-finite weights, an output
// path the rules refuse, too little free space, or a base whose format cannot be written back.
MergeReport merge_lora_into_checkpoint(const models::ModelFiles& base, const std::string& base_path,
                                       const gl::io::TensorSource& lora_file, const std::string& out,
                                       const MergeOptions& opt = {});

}  // namespace lora
