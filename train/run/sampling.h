// Sample images while training, as kohya's sample_images does: the prompt file (--sample_prompts,
// kohya's format: models/diffusion/sampler_prompts.h) every N steps or N epochs (and before the first
// step with --sample_at_first), through the text-to-image pipeline (pipelines/pipeline.h) with
// kohya's sampler presets. The pipeline runs in the trainer's shared memory: its graphs are planned
// with the run's (the plan's peak includes sampling), the UNet and text encoder are the trainer's
// copy, and the LoRA is the one being trained, read where the trainer keeps it.
//
// Files: <output_dir>/sample/<output_name>_<step:06d or e<epoch:06d>>_<prompt index:02d>_<local
// time>_<seed>.png (kohya's names) with A1111's "parameters" text. A prompt without --d uses the
// run's seed plus its index, so every sampling shows the same noise (kohya draws a new seed).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/diffusion/sampler_prompts.h"
#include "pipelines/pipeline.h"
#include "train/run/config.h"
#include "train/run/observer.h"
#include "train/step.h"

namespace train {

// The run's prompt file (--sample_prompts), read and checked: every line within diffusion::kSampleBounds
// and every sampler it uses (a line's --ss, else --sample_sampler) one sdtrain runs. Session reads
// it before opening the model, so a bad line is refused before anything is loaded; gl::Error
// naming the file, the line and the value.
std::vector<diffusion::SamplePrompt> read_sample_prompts(const RunConfig& c);

class RunSampler {
public:
    // Reads the prompt file and plans every request (gl::Error naming the file and line, or the
    // sampler that is not available).
    RunSampler(const RunConfig& c, const models::ModelFiles& model, const StepOptions& step, uint64_t seed);
    ~RunSampler();

    // The pipeline's plans, for the run's layout.
    std::vector<const gl::Plan*> plans() { return plans_; }
    // Hands over the run's memory; loads the VAE decoder, and the text encoder unless the run has.
    void use_memory(std::shared_ptr<gl::SharedMemory> mem, bool text_encoder_loaded);

    bool due_at_step(int64_t step) const;    // kohya: every N steps, unless sampling per epoch
    bool due_at_epoch(int64_t epoch) const;  // every N epochs
    // Makes every prompt's image; `epoch` set for per-epoch samples (named e<epoch>).
    SampleEvent sample(int64_t step, std::optional<int64_t> epoch);

private:
    const RunConfig& c_;
    std::vector<diffusion::SamplePrompt> prompts_;
    std::vector<sd::GenerationParams> requests_;
    std::unique_ptr<sd::Pipeline> pipeline_;
    std::vector<const gl::Plan*> plans_;
    std::string model_name_;
    int clip_skip_ = 1;
};

// kohya's sample sampler name as ours: diffusion::parse_sampler_name with a message naming the option.
diffusion::SamplerOptions sample_sampler_options(const std::string& name, bool v_prediction, const std::string& where);

}  // namespace train
