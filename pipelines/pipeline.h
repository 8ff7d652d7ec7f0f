// Text-to-image with SD1.5 (gl-txt2img, sdtrain's sample images): the CLIP text encoder, the UNet
// driven by a sampler (models/diffusion/sampler.h) with classifier-free guidance, and the VAE
// decoder, each a forward-only graph planned like any other graph.
//
// What it computes, as diffusers' StableDiffusionPipeline does:
//   context = text_encoder(negative prompt), text_encoder(prompt)       (once per request)
//   latents = unit noise (one generator per image: seed, seed + 1, ...) * init_noise_sigma
//   per model call: eps_u, eps_c = unet([x, x] scaled, t, context)      (one UNet batch of 2B)
//                   eps = eps_u + cfg (eps_c - eps_u); sampler step      (host, f32 / double)
//   image = clamp(vae_decode(latents) / 2 + 0.5, 0, 1)                   (u8: round(255 x))
// A CFG scale <= 1 runs the conditional pass alone (batch B), as diffusers does.
//
// Long prompts: the token ids are cut into up to max_chunks chunks of 75 (BOS + 75 + EOS each),
// as many as the longer of prompt and negative prompt needs, every chunk encoded on its own and
// the 77 states of each concatenated ([N, chunks * 77, D]), which is how kohya's sample images
// (its long-prompt-weighting pipeline), A1111 and ComfyUI feed the UNet. Emphasis syntax such as
// "(word:1.2)" is not parsed: brackets are text.
//
// Graphs and memory: every shape in use (image size and batch for the UNet and VAE, chunk count
// for the text encoder) is its own graph and plan, and all of them run in one gl::SharedMemory
// (core/shared_memory.h): the weights (and LoRA parameters) once, one activation arena as large as
// the largest graph's. Each model is also planned once at a minimal shape that holds all its
// weights; the runtimes of those plans load them. The memory is laid out from every plan made so
// far when the first request runs; a later request whose graphs do not fit lays it out again and
// reloads the weights, so callers that know their requests list them with reserve() first. A
// layout is never larger than the memory budget (memory_budget()): past it, only the request's own
// graphs are laid out, and a request that is over it alone is refused before anything is
// allocated, naming the largest sizes that fit.
// The VAE decode is planned before it runs: when its activations exceed vae_budget_bytes it
// decodes image by image, and when one image is still over the budget it decodes in overlapping
// tiles blended as diffusers' AutoencoderKL.tiled_decode does (tile vae_tile latents, overlap
// 1/4), so the activation peak is one tile's.
//
// LoRA / LoCon / LoHa / LoKr files, DoRA or not (any format lora::load_lora reads; the modules
// the file holds, lora/file_modules.h) apply at their multipliers either beside every layer they
// adapt (runtime; the base weights untouched) or merged into the weights once at load (faster steps). Library code: throws gl::Error, prints nothing.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "data/png_file.h"
#include "ggml-lite/core/quant.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/core/shared_memory.h"
#include "lora/lora.h"
#include "models/diffusion/sampler.h"
#include "models/model_files.h"
#include "models/sd15/tokenizer.h"
#include "models/sd15/vae.h"

namespace sd {

struct LoraFile {
    std::string path;
    float multiplier = 1.0f;
};

struct PipelineOptions {
    gl::Backend backend = gl::Backend::automatic;  // CUDA when available, else the CPU
    gl::DType dtype = gl::DType::bf16;  // weights and activations (f32 for the CPU reference)
    // The UNet's and text encoder's matrices in 8 bits (core/quant.h; not with merge_loras).
    gl::WeightFormat unet_format = gl::WeightFormat::dense, text_encoder_format = gl::WeightFormat::dense;
    std::vector<LoraFile> loras;
    bool merge_loras = false;           // merged into the weights at load instead of runtime branches
    int clip_skip = 1;                  // kohya / A1111 numbering: 2 takes the penultimate layer
    int max_chunks = 3;                 // long prompts: at most 3 x 75 tokens
    size_t vae_budget_bytes = size_t(2) << 30;  // activations of one VAE decode pass
    // The most bytes the pipeline's own memory may take; it never takes more than is free when it
    // is laid out either (the GPU's free memory on CUDA, gl::host_available_bytes() on the CPU).
    std::optional<size_t> memory_limit;
    int vae_tile = 64;                  // latent side of a VAE tile (diffusers: sample_size / 8)
    // Sampling while training (sdtrain): the LoRA being trained, applied as branches whose
    // parameters carry the trainer's names, so that on the trainer's memory (use_memory) they are
    // the trainer's current values, not a copy. Its dropouts are not applied. Not with `loras`.
    std::optional<lora::LoraConfig> trained_lora;
    bool trained_unet = true, trained_text_encoder = false;  // the parts it has modules for
};

struct GenerationParams {
    std::string prompt, negative;
    int width = 512, height = 512;  // pixels: multiples of 8 times the UNet's size multiple
    double cfg_scale = 7.5;
    int steps = 30;
    diffusion::SamplerOptions sampler;
    uint64_t seed = 0;  // image b of the batch uses seed + b
    int batch = 1;
};

// How the VAE decode of one request runs, decided from its memory plan.
struct VaeDecodePlan {
    enum class Mode : uint8_t { whole_batch, per_image, tiled } mode = Mode::whole_batch;
    size_t activation_bytes = 0;  // of the pass that runs (the whole batch, one image or one tile)
    size_t whole_batch_bytes = 0;  // what decoding the batch at once would need
    int tiles = 1;                 // per image
    int tile = 0;                  // latent side of a tile (tiled)
};
const char* vae_mode_name(VaeDecodePlan::Mode m);
// The (batch, latent height, latent width) of the decoder passes a plan runs, each shape once.
std::vector<std::tuple<int, int, int>> decode_shapes(const VaeDecodePlan& vp, int batch, int latent_h, int latent_w);

class Pipeline {
public:
    // `model` comes from its family's open (models::Family::open). Plans the models and reads the LoRA files (formats, ranks and
    // shapes checked; nothing is allocated until the first request). Throws gl::Error naming the
    // file for a bad LoRA file, or the option that is out of range.
    Pipeline(models::ModelFiles model, PipelineOptions opt);
    ~Pipeline();
    Pipeline(const Pipeline&) = delete;
    Pipeline& operator=(const Pipeline&) = delete;

    const PipelineOptions& options() const { return opt_; }
    const models::ModelFiles& model() const { return model_; }

    // Throws gl::Error naming the culprit for a size the models cannot take, bad steps, CFG scale
    // or batch, or sampler options diffusers would refuse.
    void validate(const GenerationParams& p) const;
    // Plans every graph these requests need and lays the memory out for all of them at once
    // (allocating it and loading the weights), so no later request among them reloads.
    void reserve(const std::vector<GenerationParams>& requests);

    // Running in a caller's memory (sdtrain samples beside its training graphs, on one copy of the
    // UNet and text encoder): plans() plans what these requests need and returns those plans with
    // each model's weight holder, for the caller's layout; use_memory() then hands over the memory
    // laid out with them. From then on the pipeline runs there (it never lays out memory of its
    // own; a request whose graphs do not fit is refused) and loads the weights of the models in
    // `load` now (the caller has loaded the others under the same names); the model files are
    // not read again.
    std::vector<const gl::Plan*> plans(const std::vector<GenerationParams>& requests);
    struct LoadParts {
        bool text_encoder = true, unet = true, vae = true;
    };
    void use_memory(std::shared_ptr<gl::SharedMemory> mem, LoadParts load);

    // The images of one request, RGB 8 bits. initial_noise: the unit noise to start from (NHWC,
    // batch x h/8 x w/8 x 4, f32) instead of the seeds' (tests inject diffusers' latents); the
    // sampler's own noise (ancestral, eta) still comes from the seeds. on_step(k, calls) is called
    // after every model call.
    std::vector<data::Bitmap> generate(const GenerationParams& p, const std::vector<float>* initial_noise = nullptr,
                                        const std::function<void(int, int)>& on_step = {});

    // generate() before quantisation: images in [0, 1], NHWC [B, H, W, 3]; the final latents
    // (NHWC) go to *latents when given.
    std::vector<float> generate_pixels(const GenerationParams& p, const std::vector<float>* initial_noise = nullptr,
                                       const std::function<void(int, int)>& on_step = {},
                                       std::vector<float>* latents = nullptr);

    // The pieces of generate(), for tests and tools.
    // Hidden states [N, chunks * 77, D] (row-major) of N texts, chunks chosen for the longest.
    std::vector<float> encode_text(const std::vector<std::string>& texts, int* chunks = nullptr);
    // Denoised latents (NHWC) from unit noise x; context [2B or B, L, D] as encode_text gives for
    // (negative, prompt) repeated per image, uncond rows first when cfg_scale > 1.
    std::vector<float> denoise(const GenerationParams& p, std::vector<float> x, const std::vector<float>& context,
                               int context_len, const std::function<void(int, int)>& on_step = {});
    // Images in [0, 1], NHWC [B, H, W, 3], from latents [B, h, w, 4].
    std::vector<float> decode(const std::vector<float>& latents, int batch, int latent_h, int latent_w);
    VaeDecodePlan plan_decode(int batch, int latent_h, int latent_w);

    // The memory plan of a request before it runs: each model's weights, the activations of the
    // text encoder, UNet and VAE graphs it needs, the VAE decode mode, and the memory available.
    std::string plan_report(const GenerationParams& p);

    // Per-node timing (gl::Runtime::set_profiling) of every graph the pipeline runs, for tools:
    // while on, each graph runs eagerly with each node timed (slower than the captured replay).
    // profile_report() gives, for each of the request's graphs that ran profiled, its runtime's
    // report (by op, by phase, the `top` slowest nodes), the per-run figures averaged over the
    // profiled runs; reset_profile() forgets them.
    void set_profiling(bool on);
    void reset_profile();
    std::string profile_report(const GenerationParams& p, size_t top = 20);

    // Memory budget. The pipeline lays out its own memory only within its budget (memory_budget():
    // PipelineOptions::memory_limit or what is free, whichever is less): reserve() and generate()
    // refuse requests over it before allocating, naming the sizes of largest_fitting().
    struct Budget {
        size_t bytes = 0;
        std::string what;  // "free on the GPU", "available on the host (...)", "of the memory limit"
    };
    Budget memory_budget() const;
    // The bytes of a memory holding the weights and this request's graphs alone (planned without
    // keeping the plans).
    size_t memory_needed(const GenerationParams& p);
    // The largest requests like p within `budget` bytes: the same batch with both sides shrunk
    // together in steps of 8 pixels, and the same size at a smaller batch (nullopt: none fits).
    struct Fits {
        std::optional<GenerationParams> smaller_size, smaller_batch;
    };
    Fits largest_fitting(const GenerationParams& p, size_t budget);

    // Unit noise of one request from its seeds (NHWC, one NoiseRng per image).
    std::vector<float> seed_noise(const GenerationParams& p) const;

private:
    struct Impl;
    // The chunk count of texts encoded together; the plan keys of a request's graphs (planned).
    int chunks_for(const std::vector<std::string>& texts) const;
    std::vector<std::string> graphs_for(const GenerationParams& p);
    // Plans the requests' graphs and lays out the memory for them (ensure), refusing a layout over
    // the budget with the sizes that fit (the plans it made for them are forgotten then).
    void ensure_requests(const std::vector<GenerationParams>& requests);
    models::ModelFiles model_;
    PipelineOptions opt_;
    std::unique_ptr<Impl> impl_;
};

// RGB u8 images from [0, 1] floats [B, H, W, 3] (round(255 x), as diffusers' numpy_to_pil).
std::vector<data::Bitmap> to_images(const std::vector<float>& pixels, int batch, int height, int width);

}  // namespace sd
