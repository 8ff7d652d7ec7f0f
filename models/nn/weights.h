// The weight store every model builds with: weights as graph leaves named after their internal
// keys (the module paths of the reference implementation, e.g. diffusers'
// "down_blocks.0.resnets.0.conv1.weight"), so that loading is a lookup. Each leaf remembers how
// its checkpoint tensor maps onto it (conv weights go from PyTorch's OIHW to our NHWC-friendly
// OHWI once, at load). The layers that fill it are in models/nn/layers.h.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ggml-lite/core/graph.h"
#include "ggml-lite/core/quant.h"
#include "ggml-lite/io/tensor_source.h"
#include "ggml-lite/ops/builder.h"

namespace gl {
class Runtime;
}

namespace nn {

enum class WeightLayout : uint8_t {
    plain,      // same element order as the checkpoint (linear [out, in], norms, biases, embeddings)
    conv_ohwi,  // checkpoint [O, I, kh, kw] -> leaf [O, kh, kw, I]
};

struct WeightEntry {
    std::string name;  // internal key, full dotted path
    gl::ValueId id;    // the leaf; for a quantized matrix its codes (i8 or f8e4m3)
    WeightLayout layout;
    gl::ValueId scale = gl::kNoValue;  // a quantized matrix's f32 scale per row ("<name>.scale")
};

// Creates frozen weight leaves (g.weight, in the store's dtype) under a dotted scope; asking for
// a name again returns the same leaf, so building a model twice shares its weights. With a
// quantized WeightFormat (core/quant.h) the matrices the layers multiply by (linear and conv
// weights, asked for through matrix()) are stored as codes and row scales instead; everything
// else (norms, biases, embeddings) stays in the store's dtype, which is also what the layers
// compute in.
class Weights {
public:
    Weights(gl::Graph& g, gl::DType dtype, gl::WeightFormat format = gl::WeightFormat::dense)
        : g_(g), dtype_(dtype), format_(format) {}

    gl::ValueId get(const std::string& local, const gl::Shape& shape, WeightLayout layout = WeightLayout::plain);
    gl::ValueId conv(const std::string& local, int64_t cout, int64_t cin, int64_t k) {
        return get(local, gl::Shape{cout, k, k, cin}, WeightLayout::conv_ohwi);
    }
    // A linear or conv weight in the store's format: {the leaf, kNoValue} when dense, else the
    // codes and their scale leaf (gl::QuantWeight; the ops of builder.h take either).
    gl::QuantWeight matrix(const std::string& local, const gl::Shape& shape, WeightLayout layout = WeightLayout::plain);
    void push(const std::string& scope);
    void pop();
    std::string full(const std::string& local) const;

    gl::Graph& graph() { return g_; }
    gl::DType dtype() const { return dtype_; }
    gl::WeightFormat format() const { return format_; }
    const std::vector<WeightEntry>& entries() const { return entries_; }

    // What a hook sees of the layer it is called for: its module path, input and output, and the
    // weight and bias the output was computed with (an adapter that rebuilds the weight, DoRA,
    // needs them). A linear's weight is [out, in], a conv's [out, k, k, in] (NHWC); a quantized
    // store's weight comes as its codes and row scales.
    struct LayerCall {
        std::string module;  // "down_blocks.0.attentions.0.proj_in"
        gl::ValueId x, y;
        gl::QuantWeight weight;
        gl::ValueId bias = gl::kNoValue;
        int k = 1, stride = 1, pad = 0;  // a conv's geometry (a linear: 1, 1, 0)
    };
    // Called by nn::linear for every Linear (and every 1x1 conv run as one) and by nn::conv2d for
    // every Conv2d; returns the output to use. Adapters (lora/) add their branch here without the
    // models knowing them.
    using Hook = std::function<gl::ValueId(gl::Graph&, const LayerCall&)>;
    Hook linear_hook, conv_hook;
    // Whether the layers of models/nn/layers.h also open their name as a graph scope, so that
    // their values read "mid_block.attentions.0.proj_in.linear". Off, the values keep the name of
    // the enclosing scope ("text_model.encoder.layers.0.mlp.linear"), as the CLIP text encoder's
    // always have. Weights are named by their full path either way.
    bool layer_value_scopes = true;
    // The module path of the open scope (full("") without its trailing dot).
    std::string module_path() const {
        std::string s = full("");
        if (!s.empty()) s.pop_back();
        return s;
    }

private:
    gl::Graph& g_;
    gl::DType dtype_;
    gl::WeightFormat format_;
    std::vector<std::string> scope_;
    std::vector<WeightEntry> entries_;
    std::map<std::string, size_t> index_;
};

// Opens a dotted scope for weight names only; nn::Scope (layers.h) opens it for graph values too.
struct WeightScope {
    Weights& w;
    WeightScope(Weights& w_, const std::string& s) : w(w_) { w.push(s); }
    ~WeightScope() { w.pop(); }
};

struct LoadReport {
    std::vector<std::string> missing;     // internal names whose checkpoint key is absent
    std::vector<std::string> unexpected;  // checkpoint keys nothing used (ignored prefixes excepted)
    size_t tensors = 0, bytes = 0;        // what was loaded
};

// Writes one weight from f32 values in the leaf's layout (conv weights [O, kh, kw, I]): converted
// to the leaf's dtype, or quantized per row (scales computed here) for a quantized matrix.
// Throws gl::Error naming the weight for a value its format cannot hold.
void write_weight(const Weights& w, const WeightEntry& e, const float* values, gl::Runtime& rt);

// Reads every weight from src (checkpoint key = key_of(internal name); "" means "not in this
// checkpoint": reported missing), checks its shape (a [O, I, 1, 1] conv tensor may feed an [O, I]
// linear weight, as in the original VAE's attention), converts it to the leaf's dtype and
// layout (quantizing the matrices of a quantized store per row, as write_weight does: one tensor
// in f32 on the host at a time, never the model) and writes it into the runtime. Missing weights
// throw gl::Error listing them (all of them) unless allow_missing; unexpected keys are only
// reported.
LoadReport load_weights(const Weights& w, const gl::io::TensorSource& src,
                        const std::function<std::string(const std::string&)>& key_of, gl::Runtime& rt,
                        const std::vector<std::string>& ignore_prefixes = {}, bool allow_missing = false);

}  // namespace nn
