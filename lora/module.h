// The adapter seam: one network module (the adapter of one layer) and the registry of network
// types. A type (LoRA/LoCon, LoHa, LoKr; lora/locon.cpp, loha.cpp, lokr.cpp) says which tensors a
// module of it has (named, shaped and ordered as kohya's and LyCORIS's files hold them), how they
// start, and the weight update dW they make; everything else is done here for every type alike:
//   - joining the layer's output in the graph: y + op(x, m dW) (op the layer's linear or conv,
//     without bias: LyCORIS's weight-rebuild forward), or with DoRA (lora/dora.h) the layer's
//     weight rebuilt as W' = decompose(W0 + dW) and y + op(x, W' - W0); a type may instead join
//     with a branch of its own (LoRA: y + s up(down(x)), kohya's and LyCORIS's bypass form);
//   - LyCORIS's dropouts: rank_dropout masks output rows of dW (one draw per step), module_dropout
//     skips the module (one draw per step) — the per-step gates are graph inputs;
//   - the merge on the host: W' = W0 + m dW, or the DoRA decomposition of W0 + dW;
//   - file I/O (lora/kohya.h) and the training step's parameter groups, through tensors().
// Graph values of a module are its f32 masters, named by their file keys ("<key>.<suffix>").
// Adding a type is one file defining its ModuleType and a line in module_types() (module.cpp).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ggml-lite/core/graph.h"
#include "models/family.h"
#include "models/nn/weights.h"

namespace lora {

using models::ModuleKind;
using models::Part;

// The layer a module adapts.
struct Layer {
    const models::Family* family = &models::sd15_family();
    Part part = Part::unet;
    std::string key;   // kohya's name: "lora_unet_mid_block_attentions_0_proj_in"
    std::string path;  // the model's module path: "mid_block.attentions.0.proj_in"
    ModuleKind kind = ModuleKind::linear;
    int64_t in = 0, out = 0;
    int k = 1, stride = 1, pad = 0;
    int64_t fan_in() const { return in * k * k; }
    // PyTorch's weight shape: [out, in], [out, in, 1, 1] or [out, in, k, k].
    std::vector<int64_t> torch_shape() const;
    // The graph's: [out, in] or [out, k, k, in].
    gl::Shape graph_shape() const;
};

// A type's own network args (LoKr's factor, ...), parsed by the type (ModuleType::parse_args).
struct TypeArgs {
    virtual ~TypeArgs() = default;
};

// What a network gives each of its modules.
struct ModuleSettings {
    int rank = 4;         // network_dim (conv_dim for k x k convs)
    float alpha = 0.0f;   // network_alpha (conv_alpha); 0 means rank (scale 1)
    // kohya networks.lora's dropouts (rank_dropout per sample and rank on down's output, scaled by
    // 1/(1-p); module_dropout folded into the same gate; dropout elementwise on down's output) or
    // LyCORIS's (above; its `dropout` does nothing in weight-rebuild mode).
    bool kohya_dropouts = true;
    float rank_dropout = 0.0f, module_dropout = 0.0f, dropout = 0.0f;
    bool rank_dropout_scale = false;  // LyCORIS: kept rows divided by the fraction kept
    bool dora = false;                // weight-decomposed update (dora_wd)
    bool dora_on_output = true;       // DoRA's norm per output row (wd_on_output) or per input column
    bool tucker = false;              // use_tucker: a Tucker core for k x k convs (k > 1 only)
    std::shared_ptr<const TypeArgs> own;
};

// One parameter tensor of a module.
struct Tensor {
    std::string suffix;               // the file key's suffix: "lora_down.weight", "hada_w1_a", "dora_scale"
    gl::ValueId id = gl::kNoValue;    // the f32 master
    std::vector<int64_t> file_shape;  // as the file (and PyTorch) holds it; its element order is the graph's ...
    int conv_k = 1;                   // ... unless conv_k > 1: the graph holds [A, k, k, B] for the file's [A, B, k, k]
    int rank_axis = -1;               // the file shape's axis holding the rank (load's messages), or -1
};

using ReadFn = std::function<std::vector<float>(gl::ValueId)>;
using WriteFn = std::function<void(gl::ValueId, const std::vector<float>&)>;

// What a module's graph needs from its network while it is built.
struct BuildEnv {
    float multiplier = 1.0f;
    uint64_t index = 0;                       // the module's place in its network
    std::function<gl::ValueId()> dropout_seed;  // the network's per-step dropout seed input (made on first use)
};

class ModuleType;

// A file's view of one module (lora/kohya.h builds it): its tensors under kohya's suffixes.
struct FileModule {
    std::function<bool(const std::string&)> has;                   // suffix -> present
    std::function<std::vector<int64_t>(const std::string&)> shape;  // suffix -> the file's shape
    std::function<std::string(const std::string&)> name;            // suffix -> the file's tensor name
    float alpha = 0.0f;                                              // the file's alpha (0: none, or 0)
    std::string origin;                                              // the file, for messages
};
// The rank a file's tensor holds on `axis`, refused by name outside [1, 2^31 - 1].
int read_rank(const FileModule& f, const std::string& suffix, int axis);

class Module {
public:
    Module(const ModuleType& type, Layer layer, ModuleSettings s);
    virtual ~Module() = default;
    Module(const Module&) = delete;
    Module& operator=(const Module&) = delete;

    const ModuleType& type() const { return *type_; }
    const Layer& layer() const { return layer_; }
    const ModuleSettings& settings() const { return s_; }
    const std::string& key() const { return layer_.key; }
    int rank() const { return s_.rank; }
    float alpha() const { return s_.alpha == 0.0f ? float(s_.rank) : s_.alpha; }  // never 0
    // The update's scale times the multiplier: multiplier * alpha / rank.
    float scale(float multiplier) const { return multiplier * alpha() / float(s_.rank); }
    // The alpha a file holds for this module (kohya and LyCORIS: alpha; LoKr with both factors full: the rank).
    virtual float file_alpha() const { return alpha(); }
    // The tensor whose scaling scales the update linearly: a file's alpha other than the module's
    // is folded into it on load. "" when the update ignores alpha.
    virtual std::string alpha_tensor() const = 0;
    // Parameters in training order; and the file's keys of the module in LyCORIS's state_dict
    // order ("alpha" among them).
    const std::vector<Tensor>& tensors() const { return tensors_; }
    virtual std::vector<std::string> file_order() const;
    const Tensor* tensor(const std::string& suffix) const;
    gl::ValueId param(const std::string& suffix) const;  // kNoValue when the module has none
    // Per-step inputs (dropout gates) the host writes; kNoValue when the settings need none.
    gl::ValueId gate = gl::kNoValue;       // kohya: [B, 1.., rank] on down's output
    gl::ValueId row_gate = gl::kNoValue;   // LyCORIS rank_dropout: [out] over dW's rows
    gl::ValueId skip_gate = gl::kNoValue;  // LyCORIS module_dropout: [1]

    // Creates the parameters in g and returns the layer's output with the module joined.
    gl::ValueId build(gl::Graph& g, const nn::Weights::LayerCall& base, const BuildEnv& env);
    // Writes the initial values (LyCORIS's / kohya's init). DoRA's dora_scale starts at the norms
    // of the base weight, read through `read` (load the base model first).
    void init(const WriteFn& write, const ReadFn& read, std::mt19937_64& rng) const;
    // The base weight (f32, graph layout) as `read` gives it, dequantized for a quantized store.
    std::vector<float> base_weight(const ReadFn& read) const;
    // Writes this step's gates (training), or all ones.
    void sample_gates(const WriteFn& write, const gl::Graph& g, std::mt19937_64& rng, bool training) const;
    // The weight the layer computes with, from its base weight w (graph layout, f32) in place.
    void merge(std::vector<float>& w, const ReadFn& read, float multiplier) const;

protected:
    // Adds a parameter (named "<key>.<suffix>") of the given graph shape.
    gl::ValueId add(gl::Graph& g, const std::string& suffix, const gl::Shape& graph, std::vector<int64_t> file,
                    int conv_k = 1, int rank_axis = -1);
    virtual void create(gl::Graph& g) = 0;
    // dW with its scale (not the multiplier), f32, in the graph's weight layout.
    virtual gl::ValueId delta(gl::Graph& g) const = 0;
    // The same on the host times the multiplier, accumulated as the type likes.
    virtual std::vector<float> host_delta(const ReadFn& read, float multiplier) const = 0;
    virtual void init_params(const WriteFn& write, std::mt19937_64& rng) const = 0;
    // A type's own way of joining the layer (kNoValue: the weight-rebuild forward).
    virtual gl::ValueId branch(gl::Graph&, const nn::Weights::LayerCall&, const BuildEnv&) { return gl::kNoValue; }

    const ModuleType* type_;
    Layer layer_;
    gl::QuantWeight base_;  // the layer's weight, as the hook saw it
    ModuleSettings s_;
    std::vector<Tensor> tensors_;
};

// A network type ("algo" in LyCORIS's terms). Its functions build modules; nothing else in the
// project names a type.
class ModuleType {
public:
    virtual ~ModuleType() = default;
    virtual const char* algo() const = 0;          // LyCORIS's algo: "lora", "loha", "lokr"
    virtual const char* title() const = 0;         // "LoRA", "LoHa", "LoKr" (plans, messages)
    virtual std::vector<std::string> aliases() const { return {}; }  // "locon"
    // The tensors that mark a file's module as this type (LyCORIS's weight_list_det).
    virtual std::vector<std::string> markers() const = 0;
    // The type's own network args (key=value, as given): parsed, or gl::Error naming the arg.
    // Keys it does not know are left to the caller (they are someone else's).
    virtual std::shared_ptr<const TypeArgs> parse_args(std::vector<std::pair<std::string, std::string>>& args) const {
        (void)args;
        return nullptr;
    }
    virtual std::unique_ptr<Module> make(const Layer& layer, const ModuleSettings& s) const = 0;
    // The module as a file holds it, or nullptr when the file holds none of this type for it. The
    // settings' rank, alpha, tucker and DoRA come from the file; the caller sets the rest.
    virtual std::unique_ptr<Module> read(const Layer& layer, const FileModule& f, ModuleSettings s) const = 0;
};

// Every type, in the order files are probed.
const std::vector<const ModuleType*>& module_types();
// By algo or alias (case as given), or nullptr.
const ModuleType* find_module_type(const std::string& algo);

// The family's prefix of the part ("lora_unet", "lora_te") + "_" + path with '.' -> '_'.
std::string kohya_key(const models::Family& f, Part part, const std::string& path);

// kaiming_uniform_(a = sqrt 5) for a tensor of fan_in: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
std::vector<float> kaiming_uniform(size_t n, int64_t fan_in, std::mt19937_64& rng);
std::vector<float> normal(size_t n, float stddev, std::mt19937_64& rng);

}  // namespace lora
