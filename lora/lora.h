// A network of adapter modules (lora/module.h) on the SD1.5 models, all of one type (LoRA/LoCon,
// LoHa, LoKr; with or without DoRA), placed as kohya's networks.lora or LyCORIS's kohya wrapper
// place them (lora/targets.h), or exactly as a file holds them (txt2img, gl-merge).
//
// A network attaches to a model's weight store (nn::Weights) through its linear / conv hooks
// before the model graph is built; building the model then creates each targeted layer's module,
// its parameters named by their kohya keys ("lora_unet_down_blocks_0_attentions_0_proj_in.lora_down.weight").
// The masters are f32 parameters, cast to the activations' dtype where they are used.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <ranges>
#include <string>
#include <utility>
#include <vector>

#include "ggml-lite/core/graph.h"
#include "lora/module.h"
#include "lora/targets.h"
#include "models/nn/weights.h"

namespace gl {
class Runtime;
}

namespace lora {

class FileModules;

struct LoraConfig {
    int rank = 4;            // kohya's network_dim
    float alpha = 1.0f;      // kohya's network_alpha; 0 means alpha = rank (scale 1)
    float multiplier = 1.0f;
    // Modules for k x k convs: the blocks' 3x3 convs get conv_dim / conv_alpha (0 means conv_dim);
    // 0: none. networks.lora's LoCon (its conv blocks are targeted only then); LyCORIS's default
    // is network_dim.
    int conv_dim = 0;
    float conv_alpha = 0.0f;
    // networks.lora: kohya's rank_dropout (per sample, per rank: kept ranks scaled by 1 / (1 - p)) and
    // module_dropout (per step, the whole module skipped), drawn on the host each step by
    // sample_dropout() into one gate input per module; `dropout` is kohya's network_dropout:
    // elementwise dropout on down's output (before the rank gate), a dropout node per module
    // whose mask follows a per-step seed input that sample_dropout() writes, so a captured step
    // draws new masks without a rebuild. A graph built with it is a training graph: its dropout
    // cannot be switched off (sample_dropout(training = false) refuses).
    // lycoris.kohya: LyCORIS's (lora/module.h); `dropout` does nothing there.
    float rank_dropout = 0.0f;
    float module_dropout = 0.0f;
    float dropout = 0.0f;

    // networks.lora's block-wise network (lora/block_args.h), one entry per block of the family's
    // kohya block list (models::LoraBlocks); empty: the network's rank and alpha everywhere. The
    // UNet's Linear / 1x1 modules of block i get block_dims[i] / block_alphas[i], its k x k convs
    // conv_block_dims[i] / conv_block_alphas[i] (empty: none); a rank of 0 makes no module there.
    std::vector<int> block_dims, conv_block_dims;
    std::vector<float> block_alphas, conv_block_alphas;
    // Each block's learning-rate weight (down_lr_weight, mid_lr_weight, up_lr_weight): the UNet's
    // parameters train in one group per block at unet_lr x weight (kohya's prepare_optimizer_params);
    // empty: one UNet group.
    std::vector<double> block_lr_weights;
    // LoRA+: the lr ratio of each part's up weights (their own group); unset: none.
    std::optional<double> loraplus_unet, loraplus_text_encoder;

    std::string network_module = "networks.lora";  // or "lycoris.kohya" (lora/network_args.h)
    const ModuleType* type = nullptr;              // nullptr: LoRA (networks.lora always)
    std::string preset = "full";                   // lycoris.kohya's
    bool dora = false, dora_on_output = true, tucker = false, rank_dropout_scale = false;
    std::shared_ptr<const TypeArgs> type_args;     // the type's own network args
    std::vector<std::pair<std::string, std::string>> args;  // --network_args as given (metadata)
    std::vector<std::string> notes;                // what the parse noticed (an arg without effect)
    // Modules exactly as this file holds them (their types, ranks, alphas, DoRA) instead of the
    // targets above: what txt2img, gl-merge and --dim_from_weights with LyCORIS build.
    std::shared_ptr<const FileModules> from_file;
    const models::Family* family = &models::sd15_family();  // the base model's (models/family.h)

    bool lycoris() const { return network_module == "lycoris.kohya"; }
    bool has_gates() const { return rank_dropout > 0.0f || module_dropout > 0.0f; }
    float effective_alpha() const { return alpha == 0.0f ? float(rank) : alpha; }
    float effective_conv_alpha() const { return conv_alpha == 0.0f ? float(conv_dim) : conv_alpha; }
    // k x k convs are adapted (networks.lora's LoCon: conv_dim, or conv_block_dims).
    bool locon() const { return conv_dim > 0 || !conv_block_dims.empty(); }
    // The LoRA+ ratio of a part's up weights, if any.
    std::optional<double> loraplus(Part part) const {
        return part == Part::unet ? loraplus_unet : loraplus_text_encoder;
    }
    float scale() const { return multiplier * effective_alpha() / float(rank); }
    const ModuleType& module_type() const;
    Targets targets() const;
};

class LoraNetwork {
public:
    explicit LoraNetwork(LoraConfig cfg);
    // Installs the hook on a model's Weights; attach before building that model's graph.
    // Building the graph again (or another graph on the same network) is not supported: each
    // network's parameters live in one graph.
    void attach_unet(nn::Weights& w);
    void attach_text_encoder(nn::Weights& w);

    const LoraConfig& config() const { return cfg_; }
    // Every module, in the order the graph built them.
    auto modules() const {
        return modules_ | std::views::transform([](const std::unique_ptr<Module>& m) -> const Module& { return *m; });
    }
    const Module* find(const std::string& key) const;
    std::vector<gl::ValueId> parameters() const;  // every module's tensors, in module order

    // Writes the initial values from a seeded generator (DoRA reads the base weights: load them first).
    void init(gl::Runtime& rt, uint64_t seed) const;
    // Writes every module's gates (when the config has rank or module dropout) and the network
    // dropout's seed input (when it has network dropout): training draws this step's dropouts
    // from seed; otherwise all gates are 1 (inference, validation), which a network with network
    // dropout refuses (gl::Error).
    void sample_dropout(gl::Runtime& rt, uint64_t seed, bool training = true) const;
    // The i32 scalar input holding the network dropout's per-step seed (kNoValue without it).
    gl::ValueId dropout_seed_input() const { return dropout_seed_; }
    // The network's types for plans and messages: "LoRA", "LoHa", "LoKr DoRA", ... (of the modules
    // built; the config's type before).
    std::string title() const;

private:
    gl::ValueId apply(gl::Graph& g, Part part, const nn::Weights::LayerCall& c, ModuleKind kind);
    std::unique_ptr<Module> make_module(const Layer& l) const;
    LoraConfig cfg_;
    std::vector<std::unique_ptr<Module>> modules_;
    gl::Graph* graph_ = nullptr;
    gl::ValueId dropout_seed_ = gl::kNoValue;
};

// Host-side merge: every module of `net` in `part` applied to its layer's weight (W = base's
// path + ".weight"; W' = W + m dW, or DoRA's decomposition), parameters read from lora_rt, W
// read from and written to base_rt. Returns the number of weights changed.
size_t merge_into(const LoraNetwork& net, const gl::Runtime& lora_rt, Part part, const nn::Weights& base,
                  gl::Runtime& base_rt);

}  // namespace lora
