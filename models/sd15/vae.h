// The SD1.5 VAE (diffusers AutoencoderKL) as ggml-lite graphs: the encoder (for latent caching)
// and the decoder (for sample images). Config-driven, so the tests' tiny config runs the same code.
// Weight leaves carry diffusers' keys ("encoder.down_blocks.0.resnets.0.conv1.weight",
// "encoder.mid_block.attentions.0.to_q.weight", "quant_conv.weight"); the key functions below map
// them onto a diffusers vae file or an original single-file checkpoint.
// Layouts: images and latents are NHWC. Every ResNet and attention block is a checkpoint segment.
#pragma once
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "models/nn/weights.h"

namespace sd {

struct VaeConfig {
    int in_channels = 3;
    int out_channels = 3;
    int latent_channels = 4;
    std::vector<int> block_out = {128, 256, 512, 512};
    int layers_per_block = 2;
    int norm_groups = 32;
    float eps = 1e-6f;
    float scaling_factor = 0.18215f;
    // The mid-block attention is one head as wide as the channels (512 in SD1.5), wider than the
    // fused attention kernels take (d <= 256): above this width it runs as matmul, softmax,
    // matmul, holding the [B, L, L] scores (32 MiB per image in bf16 at 64x64 latents).
    int max_fused_attention_width = 256;

    static VaeConfig sd15() { return {}; }
    // What the golden tests use: two levels of 8 and 16 channels.
    static VaeConfig tiny();
    // Throws gl::Error when the config cannot describe a VAE (channel counts not divisible by
    // the groups, no blocks, a zero scaling factor, ...).
    void validate() const;
    // Image size / latent size.
    int64_t downscale() const { return int64_t(1) << (block_out.size() - 1); }
};

struct VaeEncoded {
    gl::ValueId moments;  // [B, h, w, 2 * latent]: mean channels first, then log-variance (quant_conv's output)
    gl::ValueId mean;     // [B, h, w, latent]: a view of moments
    gl::ValueId logvar;   // [B, h, w, latent]: a view of moments, not clamped
    gl::ValueId latent;   // [B, h, w, latent]: scaling_factor * mean (the distribution's mode)
};

// x [B, H, W, in_channels] in [-1, 1], H and W multiples of downscale(). Weights are created in w
// (under its current scope) on first use.
VaeEncoded vae_encode(nn::Weights& w, const VaeConfig& c, gl::ValueId x);
// z [B, h, w, latent] as the UNet sees it (scaled); divided by scaling_factor first.
// Returns the image [B, h * downscale, w * downscale, out_channels], about [-1, 1].
gl::ValueId vae_decode(nn::Weights& w, const VaeConfig& c, gl::ValueId z);

// A sampled latent for caching, computed on the host from the encoder's moments (nothing in it
// needs a gradient): scaling_factor * (mean + exp(logvar / 2) * noise), logvar clamped to [-30, 20]
// as diffusers' DiagonalGaussianDistribution does. moments [B, h, w, 2L], noise [B, h, w, L] (N(0,1)),
// both row-major NHWC; returns [B, h, w, L].
std::vector<float> vae_sample_latent(const VaeConfig& c, std::span<const float> moments,
                                     std::span<const float> noise);

using VaeKeyFn = std::function<std::string(const std::string&)>;

// The diffusers vae file (vae/diffusion_pytorch_model.safetensors): its keys are the internal names,
// except that files saved before diffusers renamed the attention (query/key/value/proj_attn) use the
// old names; those are used for whichever attention leaf src holds only under the old name.
// The function keeps a reference to src: use it while src lives (as load_weights does).
VaeKeyFn vae_keys_diffusers(const gl::io::TensorSource& src);
// The original single-file layout (`first_stage_model.encoder.down.0.block.0.conv1.weight`,
// `...mid.attn_1.q.weight` stored as 1x1 convs, decoder `up` blocks in reverse order). Returns ""
// for a name it does not know (load_weights then reports it missing).
VaeKeyFn vae_keys_original(const VaeConfig& c, const std::string& prefix = "first_stage_model.");

// The prefix of the VAE's tensors in an original single file.
inline constexpr const char* kVaeOriginalPrefix = "first_stage_model.";

enum class VaeLayout : uint8_t {
    diffusers,  // vae/diffusion_pytorch_model[.fp16].safetensors: internal names
    original,   // original names: in a single file under first_stage_model., or a standalone VAE
                // file (sd-vae-ft-mse-original and the like) without a prefix
};
struct VaeFormat {
    VaeLayout layout = VaeLayout::diffusers;
    std::string prefix;  // of the original names: kVaeOriginalPrefix or ""
};
// Which layout src holds, found by the mid-block's first ResNet of the decoder or the encoder;
// throws gl::Error naming the source when it holds no VAE.
VaeFormat detect_vae_layout(const gl::io::TensorSource& src);
// Loads the VAE weights w holds (built by vae_encode and/or vae_decode with config c) from src
// (layout detected) into rt. Not reported as unexpected: tensors outside the VAE (a single
// file's UNet and text encoder, a standalone file's training leftovers) and the half of the VAE
// that w does not use (the encoder's tensors when only decoding).
nn::LoadReport load_vae(const nn::Weights& w, const VaeConfig& c, const gl::io::TensorSource& src, gl::Runtime& rt);

}  // namespace sd
