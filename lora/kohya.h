// LoRA files other tools load: kohya's flat safetensors layout (what A1111, ComfyUI and
// stable-diffusion.cpp read for SD1.5), written with its ss_* / modelspec.* metadata, and read
// back from kohya files (diffusers-named or LDM-named keys) and diffusers/PEFT files.
//
// kohya layout, per module: "<key>.<suffix>" for each of the module's tensors (lora/module.h:
// LoRA's lora_down.weight [r, in] ([r, in, 1, 1] for a 1x1 conv) and lora_up.weight [out, r]
// ([out, r, 1, 1]); LoHa's hada_*, LoKr's lokr_*, DoRA's dora_scale) and "<key>.alpha" 0-D; every
// tensor, alpha included, in the save precision. networks.lora files carry kohya's two hashes,
// lycoris.kohya files LyCORIS's sshs_model_hash ("0x" + the sha256 of every tensor's bytes in
// LyCORIS's state_dict order: text encoder modules first, each part in PyTorch's definition order).
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ggml-lite/io/safetensors.h"
#include "ggml-lite/io/tensor_source.h"
#include "lora/file_modules.h"
#include "lora/lora.h"

namespace lora {

enum class SavePrecision : uint8_t { fp16, bf16, fp32 };

struct SaveOptions {
    SavePrecision precision = SavePrecision::fp16;
    std::string title = "lora";            // modelspec.title
    int resolution_w = 512, resolution_h = 512;  // modelspec.resolution
    int clip_skip = 0;                     // modelspec.encoder_layer; 0: not set
    std::string prediction_type = "epsilon";
    // The trainer's keys (ss_learning_rate, ss_tag_frequency, ss_steps, modelspec.author, ...),
    // written as given; they override the network's keys this writer derives. Nothing else is
    // written: a file holds only keys kohya writes.
    std::map<std::string, std::string> training;
    // kohya's --no_metadata: only ss_v2, ss_base_model_version, ss_network_module / _dim / _alpha /
    // _args and modelspec.* are written.
    bool minimum_metadata = false;
};

// The metadata save_kohya writes (exposed so a tool can show it): the network's ss_* keys (module,
// dim, alpha, dropout, args, v2, base model version) and modelspec.* as
// sai_model_spec.build_metadata writes them for an SD1.x LoRA, then opt.training; save_kohya adds
// the hashes.
std::map<std::string, std::string> kohya_metadata(const LoraNetwork& net, const SaveOptions& opt);

// sshs_model_hash and sshs_legacy_hash, computed as kohya does (train_util.
// precalculate_safetensors_hashes): over the file safetensors' Python package would write for
// these tensors with only the ss_* keys of metadata, the sha256 of its data area and the first 8
// hex digits of the sha256 of its bytes [1 MiB, 1 MiB + 64 KiB). A1111 and the additional-networks
// extension fall back to them to identify the file.
std::pair<std::string, std::string> kohya_model_hashes(const std::vector<gl::io::TensorToWrite>& tensors,
                                                       const std::map<std::string, std::string>& metadata);

// LyCORIS's sshs_model_hash of these tensors in this order (utils.precalculate_safetensors_hashes).
std::string lycoris_model_hash(const std::vector<gl::io::TensorToWrite>& tensors);

// Whether save_kohya writes path in torch's format (.ckpt, .pt).
bool torch_file(const std::string& path);

// Parameter values come from and go to a runtime, or (tests, tools without the model's weights
// in memory) any host store (lora/module.h's ReadFn / WriteFn).

// Writes every module of net (values read from rt) atomically to path. Returns the tensor count.
// A path ending in .ckpt or .pt is written as kohya's save_weights writes it there, torch.save of
// the state dict without metadata (io/torch_save.h); any other path is safetensors.
size_t save_kohya(const std::string& path, const LoraNetwork& net, const gl::Runtime& rt, const SaveOptions& opt = {});
size_t save_kohya(const std::string& path, const LoraNetwork& net, const ReadFn& read, const SaveOptions& opt = {});

struct LoadReport {
    LoraFormat format = LoraFormat::kohya;
    size_t modules = 0;                   // modules found and loaded
    std::vector<std::string> missing;     // network modules the file does not hold (left as they were)
    std::vector<std::string> unexpected;  // file tensors nothing used
    float file_alpha = 0.0f;              // alpha of the first module loaded (rank when the file has none)
};

// Loads a LoRA file into net's parameters in rt, in the layout naming the most of its modules.
// Shapes and ranks must match the network's; a file alpha other than a module's is folded into
// the tensor its update is linear in (LoRA's up * file_alpha / alpha) so that the applied delta
// is the file's. ldm enables LDM-named kohya keys (empty: not tried). Throws gl::Error
// naming the source and tensor on a shape or rank mismatch, or when the file holds none of the
// network's modules.
LoadReport load_lora(const gl::io::TensorSource& src, const LoraNetwork& net, gl::Runtime& rt,
                     const LdmNames& ldm = {});
LoadReport load_lora(const gl::io::TensorSource& src, const LoraNetwork& net, const WriteFn& write,
                     const LdmNames& ldm = {});

}  // namespace lora
