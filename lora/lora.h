// LoRA (Hu et al. 2021) on the SD1.5 models, the way kohya's sd-scripts `networks.lora` does it:
// for a targeted Linear (weight [out, in]; SD1.5's 1x1-conv proj_in/proj_out count as Linear)
//     y = W x + multiplier * (alpha / rank) * up(down(x)),
// down [rank, in] Kaiming-uniform (torch's kaiming_uniform_(a = sqrt 5): bound 1/sqrt(in)), up
// [out, rank] zero, so a fresh network changes nothing. The masters are f32 parameters, cast to
// the activations' dtype where they are used.
//
// A network attaches to a model's weight store (nn::Weights) through its linear / conv hooks
// before the model graph is built; building the model then creates one (down, up) parameter pair
// per targeted module, named by its kohya key ("lora_unet_down_blocks_0_attentions_0_proj_in.lora_down.weight").
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ggml-lite/core/graph.h"
#include "models/nn/weights.h"

namespace gl {
class Runtime;
}

namespace lora {

struct LoraConfig {
    int rank = 4;            // kohya's network_dim
    float alpha = 1.0f;      // kohya's network_alpha; 0 means alpha = rank (scale 1)
    float multiplier = 1.0f;
    // LoCon: with conv_dim > 0 the UNet's ResnetBlock2D / Downsample2D / Upsample2D children get
    // LoRAs too: their Linear and 1x1 convs with rank/alpha, their 3x3 convs with conv_dim /
    // conv_alpha (0 means conv_dim), as kohya's conv_dim / conv_alpha network args.
    int conv_dim = 0;
    float conv_alpha = 0.0f;
    // kohya's rank_dropout (per sample, per rank: kept ranks scaled by 1 / (1 - p)) and
    // module_dropout (per step, the whole module skipped), drawn on the host each step by
    // sample_dropout() into one gate input per module. `dropout` is kohya's network_dropout:
    // elementwise dropout on down's output (before the rank gate), a dropout node per module
    // whose mask follows a per-step seed input that sample_dropout() writes, so a captured step
    // draws new masks without a rebuild. A graph built with it is a training graph: its dropout
    // cannot be switched off (sample_dropout(training = false) refuses).
    float rank_dropout = 0.0f;
    float module_dropout = 0.0f;
    float dropout = 0.0f;
    bool has_gates() const { return rank_dropout > 0.0f || module_dropout > 0.0f; }
    float effective_alpha() const { return alpha == 0.0f ? float(rank) : alpha; }
    float effective_conv_alpha() const { return conv_alpha == 0.0f ? float(conv_dim) : conv_alpha; }
    float scale() const { return multiplier * effective_alpha() / float(rank); }
};

enum class ModuleKind : uint8_t {
    linear,   // nn.Linear: kohya saves down [r, in], up [out, r]
    conv1x1,  // nn.Conv2d 1x1 run as a Linear: kohya saves down [r, in, 1, 1], up [out, r, 1, 1]
    conv,     // LoCon on a k x k conv: down a conv [r, k, k, in] with the layer's stride and padding
              // (saved [r, in, k, k]), up a 1x1 conv [out, r] (saved [out, r, 1, 1])
};

enum class Part : uint8_t { unet, text_encoder };

struct LoraModule {
    std::string key;   // kohya name without suffix: "lora_unet_mid_block_attentions_0_proj_in"
    std::string path;  // the model's module path: "mid_block.attentions.0.proj_in"
    Part part = Part::unet;
    ModuleKind kind = ModuleKind::linear;
    int64_t in = 0, out = 0;
    int rank = 0;
    float alpha = 0.0f;            // effective alpha (never 0)
    int k = 1, stride = 1, pad = 0;  // the conv's geometry (kind conv)
    float scale(float multiplier) const { return multiplier * alpha / float(rank); }
    gl::ValueId gate = gl::kNoValue;  // input [B, 1.., rank] multiplying down's output (dropouts), or none
    gl::ValueId down = gl::kNoValue, up = gl::kNoValue;  // f32 parameters [rank, in] or [rank, k, k, in]; [out, rank]
};

// The shapes kohya's files (and PyTorch's modules) hold a module's weights in, down then up:
// linear [r, in] / [out, r]; 1x1 conv [r, in, 1, 1] / [out, r, 1, 1]; conv [r, in, k, k] / [out, r, 1, 1].
// Only the conv down weight's element order differs from the graph's ([r, k, k, in] here).
std::pair<gl::Shape, gl::Shape> kohya_shapes(const LoraModule& m);

// kohya's default SD1.5 targets: in the UNet every Linear/1x1 conv inside a Transformer2DModel
// (the "attentions.N" blocks); in the text encoder the CLIPAttention q/k/v/out_proj and the
// CLIPMLP fc1/fc2 of every layer. `path` is the model's module path.
bool is_unet_target(const std::string& path);
bool is_text_encoder_target(const std::string& path);
// With conv_dim: ResnetBlock2D / Downsample2D / Upsample2D children (kohya's LoCon targets).
bool is_unet_conv_target(const std::string& path);
// SD1.5's Transformer2DModel uses 1x1 convs for proj_in/proj_out (use_linear_projection false).
ModuleKind unet_module_kind(const std::string& path);
// "lora_unet_" / "lora_te_" + path with '.' -> '_'.
std::string kohya_key(Part part, const std::string& path);

class LoraNetwork {
public:
    explicit LoraNetwork(LoraConfig cfg);
    // Installs the hook on a model's Weights; attach before building that model's graph.
    // Building the graph again (or another graph on the same network) is not supported: each
    // network's parameters live in one graph.
    void attach_unet(nn::Weights& w);
    void attach_text_encoder(nn::Weights& w);

    const LoraConfig& config() const { return cfg_; }
    const std::vector<LoraModule>& modules() const { return modules_; }
    const LoraModule* find(const std::string& key) const;
    std::vector<gl::ValueId> parameters() const;  // down, up of every module, in module order

    // Writes the initial values: down Kaiming-uniform from a seeded generator, up zero.
    void init(gl::Runtime& rt, uint64_t seed) const;
    // Writes every module's gate (when the config has rank or module dropout) and the network
    // dropout's seed input (when it has network dropout): training draws this step's dropouts
    // from seed; otherwise all gates are 1 (inference, validation), which a network with network
    // dropout refuses (gl::Error).
    void sample_dropout(gl::Runtime& rt, uint64_t seed, bool training = true) const;
    // The i32 scalar input holding the network dropout's per-step seed (kNoValue without it).
    gl::ValueId dropout_seed_input() const { return dropout_seed_; }

private:
    gl::ValueId apply(gl::Graph& g, Part part, const std::string& path, gl::ValueId x, gl::ValueId y,
                      ModuleKind kind, int k = 1, int stride = 1, int pad = 0);
    LoraConfig cfg_;
    std::vector<LoraModule> modules_;
    gl::Graph* graph_ = nullptr;
    gl::ValueId dropout_seed_ = gl::kNoValue;
};

// Host-side merge: W' = W + scale * up @ down (down flattened to [rank, k*k*in] for a conv) for
// every module of `net` in `part`, W = base's path + ".weight"; up/down read from lora_rt, W
// read from and written to base_rt.
// Returns the number of weights changed.
size_t merge_into(const LoraNetwork& net, const gl::Runtime& lora_rt, Part part, const nn::Weights& base,
                  gl::Runtime& base_rt);

}  // namespace lora
