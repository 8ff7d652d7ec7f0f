// What A1111 writes beside the images it generates, so that its tools (and ComfyUI and image
// sites) read ours the same way: the generation-parameters text ("infotext", kept in a PNG's
// "parameters" text chunk: data/png_file.h) and the grid layout of a batch.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "data/png_file.h"
#include "pipelines/pipeline.h"

namespace sd {

// A1111's generation-parameters text ("infotext"), which A1111's PNG Info tab, ComfyUI and image
// sites read back: the prompt (with <lora:name:multiplier> tags), "Negative prompt: ..." when there
// is one, then "Steps: 20, Sampler: Euler a, CFG scale: 7.5, Seed: 1, Size: 512x512, Model: name,
// ..." with values holding ',', ':' or '"' quoted.
struct InfotextFields {
    std::string model_name;  // the checkpoint's file or folder name without extension
    std::vector<std::pair<std::string, float>> loras;  // (name, multiplier)
    int clip_skip = 1;
    std::string version;  // "Version" field; "" omits it
};
std::string a1111_infotext(const GenerationParams& p, uint64_t seed, const InfotextFields& f);

// Tiles images row by row into a grid of `cols` columns. cols 0 lays them out as A1111's grids
// do by default: round(sqrt(n)) rows of as many columns as needed (2 -> 1x2, 3 and 4 -> 2x2,
// 5 and 6 -> 2x3, 7 to 9 -> 3x3). Every cell is as large as the largest image, each image centred
// in its cell, the rest black. All images must have the same channel count.
data::Bitmap make_grid(const std::vector<data::Bitmap>& images, int cols = 0);

}  // namespace sd
