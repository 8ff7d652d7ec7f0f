// kohya's --base_weights / --base_weights_multiplier (train_network.py: each file merged into the
// frozen base after the model is loaded, before the network is made): LoRA files of any type
// gl-merge reads (kohya, LDM-named kohya, diffusers, PEFT; LoCon, LyCORIS's LoHa, LoKr and DoRA),
// each through its modules' merge on the adapter seam (lora::Module::merge: W += m dW, or DoRA's
// decomposition), in the order given.
//
// The merge happens where the weights are read: the model's UNet and text encoder become views of
// their checkpoints in which every weight a module changes reads as the merged weight, computed in
// f32 from the checkpoint's values when the loader asks for it. The loader then rounds it to the
// run's dtype, or quantizes it per row for an 8-bit base, once (kohya rounds to its weight dtype
// after each file). The cache encoders, the training step and the sampler all read the views.
// Host memory: the files' tensors, plus one weight in f32 while it is read.
#pragma once
#include <string>
#include <vector>

#include "models/model_files.h"

namespace lora {

struct BaseWeightsFile {
    std::string path;
    float multiplier = 1.0f;  // finite
};

// What identifies the files and multipliers (paths, sizes, modification times): a cache of text
// encoder outputs made with them holds it in its key.
std::string base_weights_identity(const std::vector<BaseWeightsFile>& files);

// The model with its UNet and text encoder read through the merge of files (the VAE as it was).
// The files are read and checked here, the model's weights not at all. Throws gl::Error naming the
// file: one that holds no module of a known type, tensors no module of this model uses (merging
// would drop them), shapes that do not fit; and, when a weight is read, a merged weight that is
// not finite. messages: one line per file (its types and modules merged).
models::ModelFiles with_base_weights(const models::ModelFiles& model, const std::vector<BaseWeightsFile>& files,
                                std::vector<std::string>* messages = nullptr);

}  // namespace lora
