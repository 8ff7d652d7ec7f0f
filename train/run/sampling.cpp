#include "train/run/sampling.h"

#include <ctime>
#include <filesystem>

#include "data/png_file.h"
#include "ggml-lite/core/error.h"
#include "pipelines/a1111.h"
#include "pipelines/sample_prompt_files.h"
#include "train/run/save.h"

namespace train {

namespace fs = std::filesystem;

diffusion::SamplerOptions sample_sampler_options(const std::string& name, bool v_prediction, const std::string& where) {
    diffusion::SamplerName n;
    try {
        n = diffusion::parse_sampler_name(name);
    } catch (const gl::Error& e) {
        gl::fail(where, ": ", e.what());
    }
    diffusion::SamplerOptions o = diffusion::SamplerOptions::kohya(n.kind);
    o.karras = n.karras;
    o.prediction = v_prediction ? diffusion::Prediction::v_prediction : diffusion::Prediction::epsilon;
    return o;
}

namespace {

diffusion::SamplerOptions prompt_sampler(const RunConfig& c, const diffusion::SamplePrompt& p) {
    const bool own = !p.sampler.empty();
    const std::string where = !own ? "--sample_sampler" : p.where + (p.line > 0 ? " --ss" : " sample_sampler");
    diffusion::SamplerOptions o = sample_sampler_options(own ? p.sampler : c.sample_sampler, c.v_parameterization, where);
    try {
        o.validate();
        diffusion::Sampler(o, p.steps);  // the schedule too (kohya's PNDM needs 4 steps): before the run, not at its first sample
    } catch (const gl::Error& e) {
        gl::fail(where, ": ", e.what());
    }
    return o;
}

}  // namespace

std::vector<diffusion::SamplePrompt> read_sample_prompts(const RunConfig& c) {
    GL_CHECK(c.sample_prompts, "sampling: no --sample_prompts");
    std::vector<diffusion::SamplePrompt> prompts;
    try {
        prompts = sd::read_sample_prompt_file(*c.sample_prompts, diffusion::kohya_prompt_defaults());
        for (const diffusion::SamplePrompt& p : prompts) prompt_sampler(c, p);
    } catch (const gl::Error& e) {
        gl::fail("--sample_prompts: ", e.what());
    }
    return prompts;
}

RunSampler::RunSampler(const RunConfig& c, const models::ModelFiles& model, const StepOptions& step, uint64_t seed)
    : c_(c), prompts_(read_sample_prompts(c)), clip_skip_(step.clip_skip) {
    for (size_t i = 0; i < prompts_.size(); i++) {
        const diffusion::SamplePrompt& p = prompts_[i];
        sd::GenerationParams g;
        g.prompt = p.prompt;
        g.negative = p.negative;
        g.width = p.width;
        g.height = p.height;
        g.cfg_scale = p.cfg_scale;
        g.steps = p.steps;
        g.sampler = prompt_sampler(c, p);
        g.seed = p.seed.value_or(seed + i);
        requests_.push_back(g);
    }
    sd::PipelineOptions po;
    po.backend = c.backend;
    po.dtype = activation_dtype(step.precision);
    po.unet_format = step.base_format;  // the trainer's weights, stored as the step stores them
    po.text_encoder_format = step.text_encoder_format;
    po.clip_skip = step.clip_skip;
    po.trained_lora = step.lora;
    po.trained_unet = step.train_unet;
    po.trained_text_encoder = step.train_text_encoder;
    pipeline_ = std::make_unique<sd::Pipeline>(model, po);
    for (const sd::GenerationParams& g : requests_) {
        try {
            pipeline_->validate(g);
        } catch (const gl::Error& e) {
            gl::fail(*c.sample_prompts, ": prompt '", g.prompt, "': ", e.what());
        }
    }
    plans_ = pipeline_->plans(requests_);
    const fs::path m(c.pretrained_model_name_or_path);
    model_name_ = (m.has_extension() ? m.stem() : m.filename()).string();
}

RunSampler::~RunSampler() = default;

void RunSampler::use_memory(std::shared_ptr<gl::SharedMemory> mem, bool text_encoder_loaded) {
    sd::Pipeline::LoadParts parts;
    parts.unet = false;  // the trainer's
    parts.text_encoder = !text_encoder_loaded;
    pipeline_->use_memory(std::move(mem), parts);
}

bool RunSampler::due_at_step(int64_t step) const {
    return !c_.sample_every_n_epochs && c_.sample_every_n_steps && step % *c_.sample_every_n_steps == 0;
}

bool RunSampler::due_at_epoch(int64_t epoch) const {
    return c_.sample_every_n_epochs && epoch % *c_.sample_every_n_epochs == 0;
}

SampleEvent RunSampler::sample(int64_t step, std::optional<int64_t> epoch) {
    SampleEvent e;
    e.step = step;
    e.epoch = epoch;
    const fs::path dir = fs::path(c_.output_dir) / "sample";
    fs::create_directories(dir);
    char ts[32];
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    std::strftime(ts, sizeof ts, "%Y%m%d%H%M%S", &tm);
    char num[32];
    if (epoch) std::snprintf(num, sizeof num, "e%06lld", (long long)*epoch);
    else std::snprintf(num, sizeof num, "%06lld", (long long)step);
    sd::InfotextFields info;
    info.model_name = model_name_;
    info.loras = {{c_.output_name.value_or(lora_file_name(c_, SaveKind::last)), 1.0f}};
    info.clip_skip = clip_skip_;
    info.version = "sdtrain";
    for (size_t i = 0; i < requests_.size(); i++) {
        const sd::GenerationParams& g = requests_[i];
        const std::vector<data::Bitmap> img = pipeline_->generate(g);
        char idx[24];
        std::snprintf(idx, sizeof idx, "%02zu", i);
        const std::string name = (c_.output_name ? *c_.output_name + "_" : std::string()) + num + "_" + idx + "_" +
                                 ts + "_" + std::to_string(g.seed) + ".png";
        const fs::path file = dir / name;
        data::write_png(file.string(), img.at(0), {{"parameters", sd::a1111_infotext(g, g.seed, info)}});
        e.images.push_back(file.string());
        e.prompts.push_back(g.prompt);
    }
    return e;
}

}  // namespace train
