#include "lora/file_modules.h"

#include <cmath>

#include "ggml-lite/core/error.h"

namespace lora {

const char* lora_format_name(LoraFormat f) {
    switch (f) {
        case LoraFormat::kohya: return "kohya";
        case LoraFormat::kohya_ldm: return "kohya (LDM names)";
        case LoraFormat::diffusers: return "diffusers";
        case LoraFormat::peft: return "peft";
    }
    return "?";
}

std::string file_key(LoraFormat f, const Layer& l, const std::string& suffix, const LdmNames& ldm) {
    const std::string pre = (l.part == Part::unet ? "unet." : "text_encoder.") + l.path;
    switch (f) {
        case LoraFormat::kohya: return l.key + "." + suffix;
        case LoraFormat::kohya_ldm: {
            if (l.part != Part::unet || !ldm) return "";
            const std::string k = ldm(l.path);
            return k.empty() ? "" : kohya_key(*l.family, Part::unet, k) + "." + suffix;
        }
        case LoraFormat::diffusers:
            return suffix == "lora_down.weight" ? pre + ".lora.down.weight"
                   : suffix == "lora_up.weight" ? pre + ".lora.up.weight"
                                                : "";
        case LoraFormat::peft:
            return suffix == "lora_down.weight" ? pre + ".lora_A.weight"
                   : suffix == "lora_up.weight" ? pre + ".lora_B.weight"
                                                : "";
    }
    return "";
}

FileModule file_module(const gl::io::TensorSource& src, LoraFormat f, const Layer& l, const LdmNames& ldm) {
    FileModule m;
    m.origin = src.origin();
    m.name = [f, l, ldm](const std::string& suffix) { return file_key(f, l, suffix, ldm); };
    m.has = [&src, name = m.name](const std::string& suffix) {
        const std::string k = name(suffix);
        return !k.empty() && src.has(k);
    };
    m.shape = [&src, name = m.name](const std::string& suffix) { return src.info(name(suffix)).shape; };
    const std::string a = m.name("alpha");
    if (!a.empty() && src.has(a) && src.info(a).numel() == 1) {
        src.read(a, &m.alpha, gl::DType::f32);
        if (!std::isfinite(m.alpha) || m.alpha < 0.0f) m.alpha = 0.0f;  // refused by name when loaded
    }
    return m;
}

FileModules::FileModules(std::shared_ptr<const gl::io::TensorSource> src, LdmNames ldm)
    : src_(std::move(src)), ldm_(std::move(ldm)) {}

std::unique_ptr<Module> FileModules::module(const Layer& layer, const ModuleSettings& s) const {
    for (LoraFormat f : kLoraFormats) {
        const FileModule fm = file_module(*src_, f, layer, ldm_);
        for (const ModuleType* t : module_types())
            if (std::unique_ptr<Module> m = t->read(layer, fm, s)) return m;
    }
    return nullptr;
}

void FileModules::check_holds_modules() const {
    // The endings a marker takes in each layout, from a probe layer's keys.
    Layer probe;
    probe.key = "K";
    probe.path = "P";
    std::vector<std::string> endings;
    std::string names;
    for (const ModuleType* t : module_types())
        for (const std::string& m : t->markers()) {
            names += (names.empty() ? "*." : ", *.") + m;
            for (LoraFormat f : kLoraFormats) {
                const std::string k = file_key(f, probe, m, {});
                const size_t at = k.find(f == LoraFormat::kohya ? "K" : "P");
                if (!k.empty() && at != std::string::npos) endings.push_back(k.substr(at + 1));
            }
        }
    for (const gl::io::TensorInfo& t : src_->list())
        for (const std::string& e : endings)
            if (t.name.size() > e.size() && t.name.compare(t.name.size() - e.size(), e.size(), e) == 0) return;
    gl::fail("lora: ", src_->origin(), " holds no LoRA down matrices nor any other network module (no tensor named ",
             names, ")");
}

}  // namespace lora
