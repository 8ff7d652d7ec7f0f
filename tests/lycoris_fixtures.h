// Shared fixtures of the LyCORIS tests (test_lycoris_golden.cpp: LyCORIS's own modules on tiny
// layers; test_lycoris_files.cpp: the files lycoris.kohya writes and the loaders that read them).
#pragma once
#include <doctest/doctest.h>

#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ggml-lite/core/autodiff.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/core/planner.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/io/safetensors.h"
#include "lora/file_modules.h"
#include "lora/kohya.h"
#include "lora/lora.h"
#include "lora/network_args.h"
#include "models/nn/layers.h"
#include "models/sd15/clip.h"
#include "models/sd15/unet.h"
#include "test_util.h"

namespace lyco_test {

using gl::DType;
using gl::Shape;
using gl::ValueId;

inline std::string lyco(const std::string& name) { return gltest::golden_dir("lycoris") + name; }

inline nlohmann::json read_json(const std::string& name) {
    return nlohmann::json::parse(gltest::slurp(lyco(name)));
}

// Another source's tensors under other names: `rename` maps an inner name to its outer name, or
// "" to leave it out.
class Renamed : public gl::io::TensorSource {
public:
    Renamed(const gl::io::TensorSource& s, const std::function<std::string(const std::string&)>& rename) : s_(s) {
        for (const gl::io::TensorInfo& t : s.list()) {
            const std::string n = rename(t.name);
            if (!n.empty()) to_inner_[n] = t.name;
        }
    }
    std::string origin() const override { return "renamed(" + s_.origin() + ")"; }
    std::vector<gl::io::TensorInfo> list() const override {
        std::vector<gl::io::TensorInfo> out;
        for (const auto& [name, inner] : to_inner_) out.push_back(info(name));
        return out;
    }
    bool has(const std::string& n) const override { return to_inner_.count(n) != 0; }
    gl::io::TensorInfo info(const std::string& n) const override {
        gl::io::TensorInfo t = s_.info(inner(n));
        t.name = n;
        return t;
    }
    void read(const std::string& n, void* dst, DType to) const override { s_.read(inner(n), dst, to); }

private:
    std::string inner(const std::string& n) const {
        auto it = to_inner_.find(n);
        if (it == to_inner_.end()) gl::fail(origin(), ": no tensor ", n);
        return it->second;
    }
    const gl::io::TensorSource& s_;
    std::map<std::string, std::string> to_inner_;
};

// [N, C, H, W] <-> [N, H, W, C]; [O, I, kh, kw] <-> [O, kh, kw, I] is the same with N = O.
inline std::vector<float> nchw_to_nhwc(const std::vector<float>& x, int64_t n, int64_t c, int64_t hw) {
    std::vector<float> y(x.size());
    for (int64_t a = 0; a < n; a++)
        for (int64_t b = 0; b < c; b++)
            for (int64_t p = 0; p < hw; p++) y[size_t((a * hw + p) * c + b)] = x[size_t((a * c + b) * hw + p)];
    return y;
}
inline std::vector<float> nhwc_to_nchw(const std::vector<float>& x, int64_t n, int64_t c, int64_t hw) {
    std::vector<float> y(x.size());
    for (int64_t a = 0; a < n; a++)
        for (int64_t b = 0; b < c; b++)
            for (int64_t p = 0; p < hw; p++) y[size_t((a * c + b) * hw + p)] = x[size_t((a * hw + p) * c + b)];
    return y;
}

// One SD1.5-named layer (a Linear, or a Conv2d with a 1x1 or k x k kernel) in an f32 graph with a
// network attached: y = layer(x), loss = sum(y * gy), gradients of the network's parameters and x.
struct OneLayer {
    gl::Graph g;
    nn::Weights w{g, DType::f32};
    lora::LoraNetwork net;
    bool conv = false;
    int64_t in = 0, out = 0, k = 1;
    ValueId x = gl::kNoValue, y = gl::kNoValue, gy = gl::kNoValue, loss = gl::kNoValue;
    gl::Gradients grads;
    std::unique_ptr<gl::Runtime> rt;

    // layer: cases.json's {"kind": "linear" | "conv2d", in, out, k, stride, pad}; x_shape PyTorch's.
    OneLayer(lora::LoraConfig cfg, const nlohmann::json& layer, const std::vector<int64_t>& x_shape)
        : net(std::move(cfg)) {
        net.attach_unet(w);
        conv = layer.at("kind") == "conv2d";
        in = layer.at("in"), out = layer.at("out");
        if (conv) k = layer.at("k");
        const std::string scope = conv ? "down_blocks.0.resnets.0" : "down_blocks.0.attentions.0.transformer_blocks.0.attn1";
        x = conv ? g.param("x", DType::f32, {x_shape[0], x_shape[2], x_shape[3], in})
                 : g.param("x", DType::f32, Shape::of(x_shape));
        {
            nn::WeightScope s(w, scope);
            y = conv ? nn::conv2d(w, k == 1 ? "conv_shortcut" : "conv1", x, out, int(k), layer.at("stride"),
                                  layer.at("pad"))
                     : nn::linear(w, "to_q", x, out, true);
        }
        gy = g.input("gy", DType::f32, g.shape(y));
        loss = gl::sum(g, gl::mul(g, y, gy));
        g.mark_output(y);
        g.mark_output(loss);
        grads = gl::backward(g, loss);
        rt = gl::make_cpu_runtime(gl::make_plan(g));
    }
    std::string path() const {
        return conv ? (k == 1 ? "down_blocks.0.resnets.0.conv_shortcut" : "down_blocks.0.resnets.0.conv1")
                    : "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q";
    }
    const nn::WeightEntry& entry(const std::string& name) const {
        for (const nn::WeightEntry& e : w.entries())
            if (e.name == name) return e;
        gl::fail("no weight ", name);
    }
    // The base layer's weight (PyTorch's layout) and bias.
    void write_base(const std::vector<float>& weight, const std::vector<float>& bias) {
        rt->write_f32(entry(path() + ".weight").id, conv ? nchw_to_nhwc(weight, out, in, k * k) : weight);
        rt->write_f32(entry(path() + ".bias").id, bias);
    }
    std::vector<float> weight() const {
        const std::vector<float> v = rt->read_f32(entry(path() + ".weight").id);
        return conv ? nhwc_to_nchw(v, out, in, k * k) : v;
    }
    // x and gy in PyTorch's layouts.
    void write_inputs(const std::vector<float>& xv, const std::vector<float>& gyv) {
        const gl::Shape s = g.shape(x), t = g.shape(y);
        rt->write_f32(x, conv ? nchw_to_nhwc(xv, s[0], in, s[1] * s[2]) : xv);
        rt->write_f32(gy, conv ? nchw_to_nhwc(gyv, t[0], out, t[1] * t[2]) : gyv);
    }
    std::vector<float> y_torch() const {
        const gl::Shape t = g.shape(y);
        const std::vector<float> v = rt->read_f32(y);
        return conv ? nhwc_to_nchw(v, t[0], out, t[1] * t[2]) : v;
    }
    std::vector<float> grad_x_torch() const {
        const gl::Shape s = g.shape(x);
        const std::vector<float> v = rt->read_f32(grads[x]);
        return conv ? nhwc_to_nchw(v, s[0], in, s[1] * s[2]) : v;
    }
    // A parameter's gradient in the file's element order.
    std::vector<float> grad_file(const lora::Tensor& t) const {
        const std::vector<float> v = rt->read_f32(grads[t.id]);
        return t.conv_k > 1 ? nhwc_to_nchw(v, t.file_shape[0], t.file_shape[1], int64_t(t.conv_k) * t.conv_k) : v;
    }
};

// A lycoris.kohya config from network args as kohya passes them (strings).
inline lora::LoraConfig lycoris_config(int dim, double alpha, std::vector<std::pair<std::string, std::string>> args) {
    return lora::network_config({"lycoris.kohya", dim, alpha, std::nullopt, std::move(args)});
}

// SD1.5's UNet and text encoder in one graph with a network on both (built, never run).
struct Sd15 {
    gl::Graph g;
    nn::Weights wu{g, DType::bf16}, wt{g, DType::bf16};
    lora::LoraNetwork net;
    explicit Sd15(lora::LoraConfig c) : net(std::move(c)) {
        net.attach_unet(wu);
        net.attach_text_encoder(wt);
        sd::build_clip(wt, g, g.input("ids", DType::i32, {1, 77}), sd::ClipConfig::vit_l14());
        sd::unet_forward(wu, sd::UnetConfig::sd15(), g.input("x", DType::bf16, {1, 8, 8, 4}),
                         g.input("t", DType::f32, {1}), g.input("c", DType::bf16, {1, 77, 768}));
    }
};

// A weight's PyTorch shape from ours (a conv's [O, kh, kw, I] is PyTorch's [O, I, kh, kw]).
inline std::vector<int64_t> torch_shape(const gl::Shape& s) {
    std::vector<int64_t> t;
    for (int i = 0; i < s.nd; i++) t.push_back(s[i]);
    if (t.size() == 4) t = {t[0], t[3], t[1], t[2]};
    return t;
}

// "[320, 320, 1, 1]", as kohya_sd15.json keys its tables.
inline std::string shape_key(const std::vector<int64_t>& s) {
    std::string r = "[";
    for (size_t i = 0; i < s.size(); i++) r += (i ? ", " : "") + std::to_string(s[i]);
    return r + "]";
}

// Every key a module puts in a file, with its shape.
inline std::map<std::string, std::vector<int64_t>> file_tensors(const lora::Module& m) {
    std::map<std::string, std::vector<int64_t>> t;
    for (const std::string& s : m.file_order()) t[s] = s == "alpha" ? std::vector<int64_t>{} : m.tensor(s)->file_shape;
    return t;
}

}  // namespace lyco_test
