// kohya's sample-prompt files in all three forms (library/train_util.py load_prompts):
//   .txt   one prompt per line with --n --w --h --d --l --s --ss (models/diffusion/sampler_prompts.h)
//   .toml  a [prompt] table of shared keys and its [[prompt.subset]] tables, one per prompt; each
//          prompt is the shared keys and its own (kohya's dict(**prompt, **subset): a key in both
//          is refused, as Python refuses it)
//   .json  a list whose entries are objects of those keys, or strings read as a .txt line
// The keys are sample_image_inference's: prompt, negative_prompt, width, height, scale, seed,
// sample_steps, sample_sampler (kohya's defaults for the missing ones). Where kohya ignores a key
// it does not know, it is refused here naming the file, the prompt and the key (kohya's keys for
// other model families by name, as the .txt reader refuses their flags); values are checked by
// type (whole numbers for sizes, steps and seed) and against diffusion::kSampleBounds.
#pragma once
#include <string>
#include <vector>

#include "models/diffusion/sampler_prompts.h"

namespace sd {

// Reads path by its extension (.toml, .json, else the line format); throws gl::Error naming the
// file and the prompt when it cannot be read, holds no prompt or a bad one.
std::vector<diffusion::SamplePrompt> read_sample_prompt_file(const std::string& path,
                                                             const diffusion::SamplePrompt& defaults);

}  // namespace sd
