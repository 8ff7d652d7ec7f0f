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
//   model       opening the model files as distributed (models::ModelFiles, its configuration a
//               ModelConfig the family defines), building the denoiser and text encoder graphs,
//               loading their weights and saying where the files keep them (the trainer, the
//               session, the caches, the pipelines and gl-merge ask it)
// SD1.5 is the first family (models/sd15/family.cpp), SD2.x the second (models/sd2/family.cpp). A
// family is a folder under models/ holding its model code and one family file defining its Family
// and registering it in models/family.cpp.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ggml-lite/core/graph.h"

namespace gl {
class Runtime;
}
namespace nn {
class Weights;
}

namespace models {

struct ModelFiles;  // models/model_files.h: the model as opened

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

// The configuration of a model's denoiser and text encoders as its family defines it (SD1.x /
// SD2.x: sd::SdConfig, models/sd15/sd_config.h). Above models/ it is carried whole (the opened
// model's, the step's) and handed back to the family's builders; what the layers above need of it
// is asked here.
class ModelConfig {
public:
    virtual ~ModelConfig() = default;
    virtual int64_t latent_channels() const = 0;  // the denoiser's input channels (SD inpainting: 9)
    virtual int64_t context_width() const = 0;    // the width of the text context the denoiser takes
    virtual int size_multiple() const = 0;        // the latent sides the denoiser takes are its multiples
    virtual int64_t text_width() const = 0;       // the width of the text encoders' context
    virtual int text_layers() const = 0;          // the hidden states clip_skip can count back (1..)
    virtual void validate() const = 0;            // throws gl::Error naming the field
};

// Where a model file stores a weight: rows [slice, slice + 1) of `slices` equal row blocks of the
// tensor `key` (SD2.x's single file: q, k and v joined in one in_proj_weight), or all of it.
struct StoredWeight {
    std::string key;  // "" when the file holds no such weight
    int slice = 0, slices = 1;
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
    virtual ModelFiles open(const std::string& path, bool prefer_fp16 = false) const = 0;
    // The configuration of the model as distributed (SD1.5: the UNet's and CLIP ViT-L/14's).
    virtual std::shared_ptr<const ModelConfig> config() const = 0;
    // The denoiser's forward pass (eps or v [B, h, w, C]) from latents x [B, h, w, C], timesteps t
    // [B] and the text context [B, T, width], its weight leaves created in w.
    virtual gl::ValueId denoiser(nn::Weights& w, const ModelConfig& c, gl::ValueId x, gl::ValueId t,
                                 gl::ValueId context) const = 0;
    // The text encoders' context [B, TokenLayout::context_rows(chunks), width] from ids
    // [B * chunks, sequence], the hidden state the family takes (clip_skip counting on from it).
    virtual gl::ValueId text_context(nn::Weights& w, gl::Graph& g, gl::ValueId ids, int chunks, const ModelConfig& c,
                                     int clip_skip) const = 0;
    // The same hidden state of each sequence apart, [N, sequence, width] from ids [N, sequence]
    // (the sampler pipeline joins a prompt's sequences itself, as A1111 does).
    virtual gl::ValueId text_states(nn::Weights& w, gl::Graph& g, gl::ValueId ids, const ModelConfig& c,
                                    int clip_skip) const = 0;
    // Reads a part's weights from the opened model into the leaves its builder created in w.
    virtual void load(Part part, nn::Weights& w, const ModelFiles& m, gl::Runtime& rt) const = 0;
    // The single-file (LDM) key of a denoiser module path, as LoRA files name them by it
    // (lora::LdmNames); "" when none.
    virtual std::function<std::string(const std::string&)> ldm_names(const ModelConfig& c) const = 0;
    // The key the opened part's weights (ModelFiles::unet, ::text_encoder) hold the weight `name`
    // of a part's builder under ("" when none), and where the model's own file stores it (a
    // single file's part may be a view of the file under other keys: SD2.x's text encoder).
    virtual std::string weight_key(const ModelFiles& m, Part part, const std::string& name) const = 0;
    virtual StoredWeight stored_weight(const ModelFiles& m, Part part, const std::string& name) const {
        return {weight_key(m, part, name)};
    }
};

const Family& sd15_family();
const Family& sd2_family();
// The families by name ("sd15", "sd2"); nullptr when unknown.
const Family* find_family(std::string_view name);
std::vector<std::string> family_names();

}  // namespace models
