// The SD1.5 denoiser: diffusers' UNet2DConditionModel (the cross-attention UNet of Stable
// Diffusion 1.x), built as a ggml-lite graph from a config, so that the tiny test configs and
// the real model run the same code.
//
// Weight leaves are named by diffusers keys ("down_blocks.0.attentions.0.transformer_blocks.0.
// attn1.to_q.weight"); graph values get the same dotted scopes. Every ResnetBlock2D and every
// Transformer2DModel is one checkpoint segment (what gradient checkpointing recomputes).
//
// Layouts: latents NHWC [B, h, w, C]; timesteps [B] (float, may be fractional); text context
// [B, S, cross_attention_dim]. Activations take the weights' dtype (inputs are cast to it).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "models/nn/weights.h"

namespace sd {

enum class UnetBlock : uint8_t {
    plain,       // DownBlock2D / UpBlock2D: resnets only
    cross_attn,  // CrossAttnDownBlock2D / CrossAttnUpBlock2D: a Transformer2DModel after each resnet
};

struct UnetConfig {
    int in_channels = 4;
    int out_channels = 4;
    std::vector<int> block_out = {320, 640, 1280, 1280};
    std::vector<UnetBlock> down = {UnetBlock::cross_attn, UnetBlock::cross_attn, UnetBlock::cross_attn,
                                   UnetBlock::plain};
    std::vector<UnetBlock> up = {UnetBlock::plain, UnetBlock::cross_attn, UnetBlock::cross_attn,
                                 UnetBlock::cross_attn};
    int layers_per_block = 2;
    // Attention heads per transformer (head dim = channels / heads). SD1.5's diffusers config
    // calls this `attention_head_dim` (8), a historical misnomer: it is the number of heads.
    int heads = 8;
    // SD2.x's configs give the head count per level (attention_head_dim [5, 10, 20, 20]: head dim
    // 64 at every level); empty: `heads` everywhere. The mid block takes the deepest level's.
    std::vector<int> level_heads;
    // Transformer2DModel's proj_in / proj_out are nn.Linear (SD2.x) instead of 1x1 convs (SD1.x):
    // the same graph (load_weights takes either shape), but adapters see Linear modules.
    bool linear_projection = false;
    // diffusers' upcast_attention (SD2.1 768-v): scores in f32 for fp16 models. Every backend
    // accumulates attention in f32 already, so it changes nothing here; kept to describe the model.
    bool upcast_attention = false;
    int cross_attention_dim = 768;
    int transformer_layers = 1;  // BasicTransformerBlocks per Transformer2DModel
    int norm_groups = 32;
    float norm_eps = 1e-5f;              // resnets and conv_norm_out
    float transformer_norm_eps = 1e-6f;  // Transformer2DModel's group norm (fixed in diffusers)
    float layer_norm_eps = 1e-5f;        // BasicTransformerBlock's layer norms
    bool flip_sin_to_cos = true;         // Timesteps(flip_sin_to_cos, downscale_freq_shift)
    float freq_shift = 0.0f;

    int heads_at(size_t level) const { return level_heads.empty() ? heads : level_heads.at(level); }
    int time_proj_dim() const { return block_out.at(0); }        // sinusoidal embedding width
    int time_embed_dim() const { return 4 * block_out.at(0); }   // TimestepEmbedding output
    // How often the down path halves the latents. unet_forward takes any size (odd sides are
    // rounded up on the way down and cropped on the way up, as diffusers does); multiples of this
    // need no cropping (the training step requires them).
    int size_multiple() const { return 1 << (int(block_out.size()) - 1); }

    // Throws gl::Error naming the first inconsistency (channel counts not divisible by groups or
    // heads, block type lists of the wrong length, ...).
    void validate() const;

    static UnetConfig sd15();
    // stable-diffusion-2-1 and -2-base (the same UNet; 2.1's upcast_attention changes nothing here).
    static UnetConfig sd2();
    // The golden-test model: block_out (16, 32), one cross-attention and one plain block, one
    // layer per block, 8 groups, 2 heads, cross-attention width 16 (its weights stay a few
    // hundred KB). Mirrors tests/golden/make_unet_golden.py.
    static UnetConfig tiny();
    // tiny() with SD2.x's settings: per-level heads (2, 4), linear projections, upcast attention,
    // cross-attention width 24. Mirrors tests/golden/make_sd2_unet_golden.py.
    static UnetConfig tiny_sd2();
};

// Builds the UNet's forward pass into w's graph and returns eps [B, h, w, out_channels].
// Weight leaves are created in w on first use (building twice shares them). x [B, h, w,
// in_channels], t [B], context [B, S, cross_attention_dim]; any float dtype (cast to w's).
gl::ValueId unet_forward(nn::Weights& w, const UnetConfig& c, gl::ValueId x, gl::ValueId t, gl::ValueId context);

// Checkpoint key functions for load_weights, from internal (diffusers) names:
// - a diffusers `unet/diffusion_pytorch_model.safetensors`: the name itself;
// - an original single-file checkpoint (CompVis LDM layout): "model.diffusion_model.input_blocks.
//   1.1.proj_in.weight" and so on; "" for a name with no counterpart.
std::string unet_key_diffusers(const std::string& name);
std::string unet_key_original(const UnetConfig& c, const std::string& name);
// The original layout's module path of a diffusers module path ("down_blocks.0.attentions.0.proj_in"
// -> "input_blocks.1.1.proj_in"), "" for one with no counterpart: the LDM names LoRA files of old
// extractors use (lora::LdmNames).
std::string unet_module_original(const UnetConfig& c, const std::string& path);
std::function<std::string(const std::string& path)> unet_ldm_names(const UnetConfig& c);  // the above, bound
// The prefix of the UNet's tensors in an original single file.
inline constexpr const char* kUnetOriginalPrefix = "model.diffusion_model.";

enum class UnetLayout : uint8_t {
    diffusers,  // unet/diffusion_pytorch_model[.fp16].safetensors: internal names
    original,   // SD single file: model.diffusion_model.* (with the text encoder and VAE beside it)
};
const char* unet_layout_name(UnetLayout l);
// Which layout src holds, found by conv_in's weight; throws gl::Error naming the source when it
// holds no UNet.
UnetLayout detect_unet_layout(const gl::io::TensorSource& src);
// Loads the UNet's weights from src (layout detected) into rt; w holds the UNet alone (built
// by unet_forward with config c). Tensors outside the UNet (a single file's text encoder, VAE,
// EMA copy, schedule buffers) are not reported as unexpected.
nn::LoadReport load_unet(const nn::Weights& w, const UnetConfig& c, const gl::io::TensorSource& src, gl::Runtime& rt);

}  // namespace sd
