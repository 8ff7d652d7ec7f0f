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
#include <memory>
#include <optional>
#include <string>

#include "ggml-lite/io/tensor_source.h"
#include "lora/module.h"
#include "models/sd15/unet.h"

namespace lora {

enum class LoraFormat : uint8_t {
    kohya,      // lora_unet_<diffusers path> / lora_te_<path>
    kohya_ldm,  // lora_unet_<original LDM path>, same suffixes
    diffusers,  // unet.<path>.lora.down.weight / text_encoder.<path>.lora.up.weight, no alpha
    peft,       // <prefix><path>.lora_A.weight / .lora_B.weight, no alpha
};
const char* lora_format_name(LoraFormat f);
inline constexpr LoraFormat kLoraFormats[] = {LoraFormat::kohya, LoraFormat::kohya_ldm, LoraFormat::diffusers,
                                              LoraFormat::peft};

// The file key of one of a layer's tensors in format f ("alpha" for the alpha), or "" when the
// format cannot name it (kohya_ldm needs the UNet's config).
std::string file_key(LoraFormat f, const Layer& l, const std::string& suffix, const sd::UnetConfig* ucfg);

// A file's module for layer l in format f (its alpha read when the format has one).
FileModule file_module(const gl::io::TensorSource& src, LoraFormat f, const Layer& l, const sd::UnetConfig* ucfg);

class FileModules {
public:
    // ucfg (copied) enables LDM names.
    FileModules(std::shared_ptr<const gl::io::TensorSource> src, const sd::UnetConfig* ucfg);
    const gl::io::TensorSource& source() const { return *src_; }
    // The module the file holds for layer, in the first layout and type that name it, or nullptr.
    std::unique_ptr<Module> module(const Layer& layer, const ModuleSettings& s) const;
    // Refuses (gl::Error) a file without a single tensor that marks a module of a known type.
    void check_holds_modules() const;

private:
    std::shared_ptr<const gl::io::TensorSource> src_;
    std::optional<sd::UnetConfig> ucfg_;
};

}  // namespace lora
