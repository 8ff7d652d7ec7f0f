// A model family: what differs between SD1.x, SD2.x and SDXL, said once, behind one interface.
// The training step, the session, the caches, the sampler pipeline, the LoRA files and the
// metadata ask the family instead of naming SD1.5:
//   tokens      the text encoders' sequence layout (77 ids holding 75 content tokens; long prompts
//               in several sequences whose outputs join)
//   latent      the latent space (channels, pixels per latent side, the VAE's scale and shift)
//   text        its text encoders: how many, their LoRA part and prefix, the hidden state taken,
//               whether a pooled output conditions the denoiser
//   conditioning the denoiser's inputs beyond latents, timestep and context (SDXL's vector "y")
//   adapters    the LoRA prefix of each part, the module classes a network's targets name
//               (kohya's Transformer2DModel, LyCORIS's presets), which Linears the UNet runs as
//               1x1 convs, and the order PyTorch defines the modules in (LyCORIS saves in it)
//   blocks      kohya networks.lora's list of the UNet's blocks (block_dims, down/mid/up_lr_weight)
//   metadata    the base-model strings kohya and modelspec write
//   model       opening the model files as distributed and building the denoiser and text encoder
//               graphs from what was opened (the trainer, the session and the pipelines ask it)
// SD1.5 is the first family (models/sd15/family.cpp), SD2.x the second (models/sd2/family.cpp). A
// family is a folder under models/ holding its model code and one family file defining its Family
// and registering it in models/family.cpp.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ggml-lite/core/graph.h"

namespace nn {
class Weights;
}
// The Stable Diffusion architecture's descriptions (models/sd15/): SD1.x and SD2.x share one
// implementation of every layer, parametrised by these configs.
namespace sd {
struct Sd15Files;
struct UnetConfig;
struct ClipConfig;
}  // namespace sd

namespace models {

// The parts a family's adapters attach to. SD1.x / SD2.x: the UNet and one text encoder.
enum class Part : uint8_t { unet, text_encoder };

// How a Linear or Conv2d module of the base is run (what an adapter on it computes over).
enum class ModuleKind : uint8_t {
    linear,   // nn.Linear: weight [out, in]
    conv1x1,  // nn.Conv2d 1x1 run as a Linear over channels (SD1.5's proj_in/out, conv_shortcut)
    conv,     // nn.Conv2d k x k with the layer's stride and padding; the graph's weight [out, k, k, in]
};

// The module classes networks name as targets (kohya's target_replace_module lists, LyCORIS's
// presets), as the family's modules fall into them.
enum class ModuleClass : uint8_t {
    transformer,      // diffusers' Transformer2DModel
    resnet,           // ResnetBlock2D
    downsample,       // Downsample2D
    upsample,         // Upsample2D
    cross_attention,  // sd-scripts' CrossAttention: a transformer block's attn1 / attn2
    text_attention,   // the text encoder's self-attention (transformers' CLIPAttention)
    text_mlp,         // the text encoder's MLP (CLIPMLP)
};

// A prompt becomes `sequences` rows of `sequence` ids: BOS, up to `content` tokens, EOS and
// padding. The text encoder's outputs of several sequences join into context_rows(sequences)
// rows (the first BOS, each sequence's content, the last EOS).
struct TokenLayout {
    int sequence = 77, content = 75;
    int max_sequences = 3;  // kohya's max_token_length 225
    int64_t ids(int sequences) const { return int64_t(sequences) * sequence; }
    int64_t context_rows(int sequences) const { return int64_t(sequences) * content + (sequence - content); }
};

// The latent space: channels, pixels per latent side, and latent = scale * (z - shift) of the
// VAE's sample z.
struct LatentSpec {
    int64_t channels = 4;
    int downscale = 8;
    double scale = 0.18215, shift = 0.0;
};

struct TextEncoderSpec {
    Part part = Part::text_encoder;
    std::string folder;       // its diffusers folder: "text_encoder"
    std::string lora_prefix;  // kohya's key prefix: "lora_te"
    // The hidden state the denoiser takes, counted from the last layer (1: the last; kohya's
    // clip_skip counts on from it). SD2.x takes the penultimate.
    int hidden_state_from_end = 1;
    bool pooled = false;  // its pooled output conditions the denoiser (SDXL)
};

// What kohya's train_network.py and sai_model_spec write to say which base a LoRA is for.
// kohya networks.lora's block-wise network args hold one value per UNet block: the down blocks'
// `down_up` entries (shallow to deep), the mid block's `mid`, then the up blocks' `down_up` (deep to
// shallow). SD1.x: 12 + 1 + 12 = 25 (kohya's NUM_OF_BLOCKS, NUM_OF_MID_BLOCKS); none: 0.
struct LoraBlocks {
    int down_up = 0, mid = 0;
    int size() const { return 2 * down_up + mid; }
};

struct BaseModelStrings {
    std::string ss_base_model_version;   // "sd_v1"
    std::string ss_v2;                   // "False"
    std::string modelspec_architecture;  // "stable-diffusion-v1" (the network type appended: "/lora")
    int resolution = 512;                // modelspec.resolution's side without --resolution (SD2 768-v: 768)
};

class Family {
public:
    virtual ~Family() = default;
    virtual std::string_view name() const = 0;         // "sd15"
    virtual std::string_view description() const = 0;  // "Stable Diffusion 1.x"
    virtual const TokenLayout& tokens() const = 0;
    virtual const LatentSpec& latent() const = 0;
    virtual std::span<const TextEncoderSpec> text_encoders() const = 0;
    // Width of the denoiser's vector conditioning input (SDXL's pooled text + size embeddings);
    // 0: none.
    virtual int64_t vector_conditioning() const { return 0; }
    virtual BaseModelStrings base_model(bool v_parameterization) const = 0;

    // Adapters: kohya's key prefix of a part ("lora_unet", "lora_te"), the classes a module
    // path (diffusers' / transformers' names) falls in, how the UNet runs a Linear module, and a
    // key that sorts module paths of one part in PyTorch's definition order.
    virtual std::string lora_prefix(Part part) const = 0;
    virtual bool in_class(ModuleClass c, Part part, const std::string& path) const = 0;
    virtual ModuleKind unet_linear_kind(const std::string& path) const = 0;
    virtual std::vector<int64_t> definition_order(Part part, const std::string& path) const = 0;
    // Modules outside the classes that LyCORIS's presets name directly: the Linear ones (SD: the
    // time embedding's) or the conv ones (SD: conv_in, conv_out).
    virtual std::vector<std::string> io_modules(bool linear) const = 0;
    // kohya's block list (LoraBlocks) and the place in it of a UNet module path (kohya's
    // get_block_index), -1 for a module in none; a family without one has no block-wise args.
    virtual LoraBlocks lora_blocks() const { return {}; }
    virtual int lora_block(const std::string& unet_path) const {
        (void)unet_path;
        return -1;
    }

    // The model as distributed (a diffusers folder or one single file; prefer_fp16 picks a
    // folder's .fp16. weights), checked to be this family's: a relative's files are refused with
    // an error naming the file and the option that opens them. Throws gl::Error.
    virtual sd::Sd15Files open(const std::string& path, bool prefer_fp16 = false) const = 0;
    // The denoiser's forward pass (eps or v [B, h, w, C]) from latents x [B, h, w, C], timesteps t
    // [B] and the text context [B, T, width], its weight leaves created in w.
    virtual gl::ValueId denoiser(nn::Weights& w, const sd::UnetConfig& c, gl::ValueId x, gl::ValueId t,
                                 gl::ValueId context) const = 0;
    // The text encoders' context [B, TokenLayout::context_rows(chunks), width] from ids
    // [B * chunks, sequence], the hidden state the family takes (clip_skip counting on from it).
    virtual gl::ValueId text_context(nn::Weights& w, gl::Graph& g, gl::ValueId ids, int chunks,
                                     const sd::ClipConfig& c, int clip_skip) const = 0;
};

const Family& sd15_family();
const Family& sd2_family();
// The families by name ("sd15", "sd2"); nullptr when unknown.
const Family* find_family(std::string_view name);
std::vector<std::string> family_names();

}  // namespace models
