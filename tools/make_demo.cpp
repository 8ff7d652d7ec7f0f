// gl-make-demo: writes the embedded demo's assets into a folder, with nothing downloaded:
//   OUT/model/       a tiny model with SD1.5's architecture (--v2: SD2.x's) as a diffusers folder
//                    (random UNet and text encoder, a hand-set VAE that averages / repeats 8x8 pixel blocks)
//   OUT/dataset/     coloured shapes with captions in kohya's layout (<repeats>_shapes/NNN.png + .txt)
//   OUT/prompts.txt  sample prompts in kohya's format
// `make demo` runs it, then trains a LoRA on it with sdtrain (tools/common/demo_assets.h).
#include <cstdio>
#include <filesystem>
#include <string>

#include "tools/common/cli.h"
#include "tools/common/demo_assets.h"

namespace {

int run(int argc, char** argv) {
    std::string out;
    demo::DatasetOptions data;
    uint64_t seed = 1;
    bool v2 = false;
    gl::cli::Parser p("gl-make-demo", "gl-make-demo: writes a tiny SD1.5-architecture model (diffusers folder), a "
                                      "dataset of coloured shapes (kohya's folder layout) and a sample-prompt file "
                                      "into OUT, for the demo training run.");
    p.add_path("OUT", out, "folder to write model/, dataset/ and prompts.txt into (created)");
    p.add_int("--seed", seed, uint64_t(0), UINT64_MAX, "seed of the model's random weights and the dataset");
    p.add_int("--repeats", data.repeats, 1, 10000, "the dataset folder's repeats (its <repeats>_ prefix)");
    p.add_int("--variants", data.variants, 1, 100, "images per colour and shape");
    p.add_int("--side", data.side, 32, 4096, "the images' short side in pixels (wide and tall ones are 1.5x longer)");
    p.add_flag("--v2", v2, "the model with SD2.x's settings (train it with sdtrain --v2)");
    p.parse(argc, argv);
    data.seed = seed;

    const std::filesystem::path dir(out);
    demo::write_model(dir / "model", v2 ? demo::model_config_sd2() : demo::model_config(), seed);
    const demo::DatasetInfo ds = demo::write_dataset(dir / "dataset", data);
    demo::write_prompts(dir / "prompts.txt", data.side);
    std::printf("model:   %s (%s diffusers folder: UNet, text encoder, VAE; built-in CLIP tokenizer)\n",
                (dir / "model").c_str(), v2 ? "SD2.x" : "SD1.x");
    std::printf("dataset: %s (%zu images with .txt captions, %d repeats)\n", ds.subset_dir.c_str(), ds.images.size(),
                data.repeats);
    std::printf("prompts: %s\n", (dir / "prompts.txt").c_str());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    return gl::cli::run_main("gl-make-demo", [&] { return run(argc, argv); });
}
