// gl-merge: merges a LoRA into an SD1.5 checkpoint and writes the merged checkpoint.
//   gl-merge BASE LORA OUT [--multiplier M] [--overwrite]
// BASE: an SD1.5 single file (.safetensors or .ckpt) or diffusers folder; LORA: a kohya / diffusers /
// PEFT LoRA or LoCon .safetensors; OUT: a .safetensors file for a single-file base, a new folder for a
// diffusers base. The base's layout, key names and dtypes are kept (lora/merge_file.h).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "ggml-lite/core/error.h"
#include "ggml-lite/io/safetensors.h"
#include "lora/merge_file.h"

namespace {

const char* kUsage =
    "usage: gl-merge BASE LORA OUT [--multiplier M] [--overwrite]\n"
    "  BASE  SD1.5 single file (.safetensors / .ckpt) or diffusers folder\n"
    "  LORA  LoRA / LoCon .safetensors (kohya, diffusers or PEFT names)\n"
    "  OUT   merged .safetensors (single-file base) or a new folder (diffusers base)\n"
    "  --multiplier M  the LoRA's strength (default 1)\n"
    "  --overwrite     replace OUT when it exists (never the base itself)\n";

int run(int argc, char** argv) {
    std::string paths[3];
    int n = 0;
    lora::MergeOptions opt;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        if (a == "-h" || a == "--help") {
            std::fputs(kUsage, stdout);
            return 0;
        }
        if (a == "--overwrite") {
            opt.overwrite = true;
            continue;
        }
        if (a == "--multiplier") {
            if (i + 1 >= argc) gl::fail("--multiplier needs a value\n", kUsage);
            char* end = nullptr;
            opt.multiplier = std::strtof(argv[++i], &end);
            if (*end || end == argv[i]) gl::fail("--multiplier wants a number, got '", argv[i], "'");
            continue;
        }
        if (n == 3) gl::fail("unexpected argument '", a, "'\n", kUsage);
        paths[n++] = a;
    }
    if (n != 3) gl::fail("expected BASE, LORA and OUT\n", kUsage);
    const auto t0 = std::chrono::steady_clock::now();
    const sd::Sd15Files base = sd::open_sd15(paths[0]);
    const gl::io::SafetensorsFile lora_file(paths[1]);
    const lora::MergeReport r = lora::merge_lora_into_checkpoint(base, paths[0], lora_file, paths[2], opt);
    for (const std::string& p : r.stale_removed) std::printf("removed %s, left by an interrupted merge\n", p.c_str());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("merged %s (%s, rank %d%s) into %s (%s) at multiplier %g: %zu UNet and %zu text encoder weights "
                "changed; %zu tensors written to %s in %.1f s\n",
                paths[1].c_str(), lora::lora_format_name(r.format), r.rank,
                r.conv_rank ? gl::cat(", conv rank ", r.conv_rank).c_str() : "", paths[0].c_str(), base.layout.c_str(),
                double(opt.multiplier), r.unet_modules, r.text_encoder_modules, r.tensors_written, paths[2].c_str(), s);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "gl-merge: error: %s\n", e.what());
        return 1;
    }
}
