// gl-merge: merges a LoRA into an SD1.x or SD2.x checkpoint and writes the merged checkpoint.
//   gl-merge BASE LORA OUT [--v2] [--multiplier M] [--overwrite]
// BASE: an SD1.x single file (.safetensors or .ckpt) or diffusers folder, SD2.x's with --v2 (the
// family opens it and refuses the other's files, naming the option); LORA: a kohya / diffusers /
// PEFT LoRA or LoCon, or a LyCORIS LoHa / LoKr / DoRA .safetensors; OUT: a .safetensors file for a single-file base, a new folder for a
// diffusers base. The base's layout, key names and dtypes are kept (pipelines/merge_file.h).
#include <chrono>
#include <cstdio>
#include <limits>
#include <string>

#include "ggml-lite/core/error.h"
#include "ggml-lite/io/safetensors.h"
#include "models/model_files.h"
#include "pipelines/merge_file.h"
#include "tools/common/cli.h"

namespace {

int run(int argc, char** argv) {
    std::string paths[3];
    lora::MergeOptions opt;
    bool v2 = false;
    gl::cli::Parser p("gl-merge", "gl-merge: merges a LoRA into an SD1.x or SD2.x checkpoint and writes the merged "
                                  "checkpoint; the base's layout, key names and dtypes are kept.");
    p.add_path("BASE", paths[0], "SD1.x (SD2.x with --v2) single file (.safetensors / .ckpt) or diffusers folder");
    p.add_path("LORA", paths[1], "LoRA / LoCon (kohya, diffusers or PEFT names), LyCORIS LoHa / LoKr / DoRA .safetensors");
    p.add_path("OUT", paths[2], "merged .safetensors (single-file base) or a new folder (diffusers base)");
    p.add_real("--multiplier", opt.multiplier, std::numeric_limits<float>::lowest(), std::numeric_limits<float>::max(),
               "the LoRA's strength");
    p.add_flag("--v2", v2, "an SD2.x base (sdtrain's and gl-txt2img's --v2)");
    p.add_flag("--overwrite", opt.overwrite, "replace OUT when it exists (never the base itself)");
    p.parse(argc, argv);
    const auto t0 = std::chrono::steady_clock::now();
    const models::Family& family = v2 ? models::sd2_family() : models::sd15_family();
    const models::ModelFiles base = family.open(paths[0]);
    const gl::io::SafetensorsFile lora_file(paths[1]);
    const lora::MergeReport r = lora::merge_lora_into_checkpoint(base, paths[0], lora_file, paths[2], opt);
    for (const std::string& p : r.stale_removed) std::printf("removed %s, left by an interrupted merge\n", p.c_str());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("merged %s (%s %s, rank %d%s) into %s (%s, %s) at multiplier %g: %zu UNet and %zu text encoder weights "
                "changed; %zu tensors written to %s in %.1f s\n",
                paths[1].c_str(), lora::lora_format_name(r.format), r.types.c_str(), r.rank,
                r.conv_rank ? gl::cat(", conv rank ", r.conv_rank).c_str() : "", paths[0].c_str(), std::string(family.description()).c_str(),
                models::layout_name(base.layout), double(opt.multiplier), r.unet_modules, r.text_encoder_modules,
                r.tensors_written, paths[2].c_str(), s);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    return gl::cli::run_main("gl-merge", [&] { return run(argc, argv); });
}
