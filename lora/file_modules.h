// How LoRA / LyCORIS files name a module's tensors, and a network built from a file: every layer
// the file holds a module for gets one of the type, rank, alpha, Tucker and DoRA the file's
// tensors say (as LyCORIS's create_network_from_weights and ComfyUI read them), whatever the
// network's own settings would target.
//
// Layouts: kohya's ("lora_unet_<diffusers path>.<suffix>", "lora_te_<path>.<suffix>", "<key>.alpha"
// 0-D), kohya's with the UNet's original LDM names (old extractors: "lora_unet_input_blocks_1_1_..."),
// diffusers' ("unet.<path>.lora.down.weight", no alpha) and PEFT's ("<part>.<path>.lora_A.weight",
// no alpha). Only LoRA's down and up have diffusers and PEFT names.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "ggml-lite/io/tensor_source.h"
#include "lora/module.h"

namespace lora {

enum class LoraFormat : uint8_t {
    kohya,      // lora_unet_<diffusers path> / lora_te_<path>
    kohya_ldm,  // lora_unet_<original LDM path>, same suffixes
    diffusers,  // unet.<path>.lora.down.weight / text_encoder.<path>.lora.up.weight, no alpha
    peft,       // <prefix><path>.lora_A.weight / .lora_B.weight, no alpha
};
const char* lora_format_name(LoraFormat f);

// The UNet's original (LDM) module path of a diffusers module path ("down_blocks.0.attentions.0.proj_in"
// -> "input_blocks.1.1.proj_in"), or "" when it has none: the model's single-file key map, which
// enables kohya's LDM-named keys (an empty function: not tried).
using LdmNames = std::function<std::string(const std::string& path)>;
inline constexpr LoraFormat kLoraFormats[] = {LoraFormat::kohya, LoraFormat::kohya_ldm, LoraFormat::diffusers,
                                              LoraFormat::peft};

// The file key of one of a layer's tensors in format f ("alpha" for the alpha), or "" when the
// format cannot name it (kohya_ldm needs the LDM names).
std::string file_key(LoraFormat f, const Layer& l, const std::string& suffix, const LdmNames& ldm);

// A file's module for layer l in format f (its alpha read when the format has one).
FileModule file_module(const gl::io::TensorSource& src, LoraFormat f, const Layer& l, const LdmNames& ldm);

class FileModules {
public:
    // ldm: the LDM names (or empty).
    FileModules(std::shared_ptr<const gl::io::TensorSource> src, LdmNames ldm);
    const gl::io::TensorSource& source() const { return *src_; }
    // The module the file holds for layer, in the first layout and type that name it, or nullptr.
    std::unique_ptr<Module> module(const Layer& layer, const ModuleSettings& s) const;
    // Refuses (gl::Error) a file without a single tensor that marks a module of a known type.
    void check_holds_modules() const;

private:
    std::shared_ptr<const gl::io::TensorSource> src_;
    LdmNames ldm_;
};

}  // namespace lora
