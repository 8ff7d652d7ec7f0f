#include "lora/lora.h"

#include <cmath>
#include <random>

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/ops/builder.h"

namespace lora {

using gl::ValueId;

namespace {

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }
bool ends_with(const std::string& s, const std::string& p) {
    return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

}  // namespace

bool is_unet_target(const std::string& path) {
    // Transformer2DModels are "<block>.attentions.N"; everything under them that is a Linear
    // or 1x1 conv reaches the hook (norms and attention itself do not).
    const bool in_block = starts_with(path, "down_blocks.") || starts_with(path, "mid_block.") ||
                          starts_with(path, "up_blocks.");
    return in_block && path.find(".attentions.") != std::string::npos;
}

bool is_text_encoder_target(const std::string& path) {
    return starts_with(path, "text_model.encoder.layers.") &&
           (path.find(".self_attn.") != std::string::npos || path.find(".mlp.") != std::string::npos);
}

bool is_unet_conv_target(const std::string& path) {
    const bool in_block = starts_with(path, "down_blocks.") || starts_with(path, "mid_block.") ||
                          starts_with(path, "up_blocks.");
    const auto has = [&](const char* s) { return path.find(s) != std::string::npos; };
    return in_block && (has(".resnets.") || has(".downsamplers.") || has(".upsamplers."));
}

ModuleKind unet_module_kind(const std::string& path) {
    return ends_with(path, ".proj_in") || ends_with(path, ".proj_out") ? ModuleKind::conv1x1 : ModuleKind::linear;
}

std::string kohya_key(Part part, const std::string& path) {
    std::string s = (part == Part::unet ? "lora_unet_" : "lora_te_") + path;
    for (char& c : s)
        if (c == '.') c = '_';
    return s;
}

std::pair<gl::Shape, gl::Shape> kohya_shapes(const LoraModule& m) {
    const int64_t r = m.rank;
    switch (m.kind) {
        case ModuleKind::linear: return {gl::Shape{r, m.in}, gl::Shape{m.out, r}};
        case ModuleKind::conv1x1: return {gl::Shape{r, m.in, 1, 1}, gl::Shape{m.out, r, 1, 1}};
        case ModuleKind::conv: return {gl::Shape{r, m.in, int64_t(m.k), int64_t(m.k)}, gl::Shape{m.out, r, 1, 1}};
    }
    gl::fail("lora: unknown module kind");
}

LoraNetwork::LoraNetwork(LoraConfig cfg) : cfg_(cfg) {
    GL_CHECK(cfg_.rank >= 1, "lora: rank must be positive, got ", cfg_.rank);
    GL_CHECK(std::isfinite(cfg_.alpha) && cfg_.alpha >= 0.0f, "lora: alpha must be finite and >= 0, got ", cfg_.alpha);
    GL_CHECK(std::isfinite(cfg_.multiplier), "lora: multiplier must be finite");
    GL_CHECK(cfg_.conv_dim >= 0 && std::isfinite(cfg_.conv_alpha) && cfg_.conv_alpha >= 0.0f,
             "lora: conv_dim and conv_alpha must be >= 0, got ", cfg_.conv_dim, " and ", cfg_.conv_alpha);
    GL_CHECK(cfg_.rank_dropout >= 0.0f && cfg_.rank_dropout < 1.0f && cfg_.module_dropout >= 0.0f &&
                 cfg_.module_dropout <= 1.0f,
             "lora: rank_dropout must be in [0, 1) and module_dropout in [0, 1], got ", cfg_.rank_dropout, " and ",
             cfg_.module_dropout);
    GL_CHECK(cfg_.dropout >= 0.0f && cfg_.dropout < 1.0f, "lora: network dropout must be in [0, 1), got ",
             cfg_.dropout);
}

void LoraNetwork::attach_unet(nn::Weights& w) {
    w.linear_hook = [this](gl::Graph& g, const std::string& path, ValueId x, ValueId y) {
        if (is_unet_target(path)) return apply(g, Part::unet, path, x, y, unet_module_kind(path));
        if (cfg_.conv_dim > 0 && is_unet_conv_target(path)) return apply(g, Part::unet, path, x, y, ModuleKind::linear);
        return y;
    };
    w.conv_hook = [this](gl::Graph& g, const std::string& path, ValueId x, ValueId y, int k, int stride, int pad) {
        if (cfg_.conv_dim <= 0 || !is_unet_conv_target(path)) return y;
        // A 1x1 stride-1 conv on NHWC is a Linear over channels (conv_shortcut).
        if (k == 1 && stride == 1 && pad == 0) return apply(g, Part::unet, path, x, y, ModuleKind::conv1x1);
        return apply(g, Part::unet, path, x, y, ModuleKind::conv, k, stride, pad);
    };
}

void LoraNetwork::attach_text_encoder(nn::Weights& w) {
    w.linear_hook = [this](gl::Graph& g, const std::string& path, ValueId x, ValueId y) {
        return is_text_encoder_target(path) ? apply(g, Part::text_encoder, path, x, y, ModuleKind::linear) : y;
    };
}

ValueId LoraNetwork::apply(gl::Graph& g, Part part, const std::string& path, ValueId x, ValueId y, ModuleKind kind,
                           int k, int stride, int pad) {
    GL_CHECK(graph_ == nullptr || graph_ == &g, "lora: ", path, ": the network's parameters live in another graph");
    graph_ = &g;
    const std::string key = kohya_key(part, path);
    GL_CHECK(find(key) == nullptr, "lora: module ", path, " was built twice (one network serves one graph build)");
    LoraModule m;
    m.key = key;
    m.path = path;
    m.part = part;
    m.kind = kind;
    m.in = g.shape(x).last();
    m.out = g.shape(y).last();
    const bool conv = kind == ModuleKind::conv;
    m.rank = conv ? cfg_.conv_dim : cfg_.rank;
    m.alpha = conv ? cfg_.effective_conv_alpha() : cfg_.effective_alpha();
    m.k = k, m.stride = stride, m.pad = pad;
    const int64_t r = m.rank;
    m.down = g.param(key + ".lora_down.weight", gl::DType::f32, conv ? gl::Shape{r, k, k, m.in} : gl::Shape{r, m.in});
    g.set_name(m.down, key + ".lora_down.weight");  // exactly the key, whatever scope is open
    m.up = g.param(key + ".lora_up.weight", gl::DType::f32, gl::Shape{m.out, r});
    g.set_name(m.up, key + ".lora_up.weight");
    modules_.push_back(m);

    // The branch runs in the activations' dtype (bf16/fp16 training casts the f32 masters).
    const gl::DType dt = g.dtype(x);
    ValueId h = conv ? gl::conv2d(g, x, gl::cast(g, m.down, dt), gl::kNoValue, stride, pad)
                     : gl::linear(g, x, gl::cast(g, m.down, dt));
    if (cfg_.dropout > 0.0f) {
        // kohya's network_dropout: F.dropout on down's output. One seed input for the network; the
        // module's index keeps the masks of different modules independent.
        if (dropout_seed_ == gl::kNoValue) {
            dropout_seed_ = g.input("lora.dropout_seed", gl::DType::i32, gl::Shape{});
            g.set_name(dropout_seed_, "lora.dropout_seed");
        }
        h = gl::dropout(g, h, cfg_.dropout, uint64_t(modules_.size()), dropout_seed_);
    }
    if (cfg_.has_gates()) {
        // [B, 1, .., rank]: one draw per sample and rank, broadcast over positions (kohya).
        gl::Shape gs = g.shape(h);
        for (int i = 1; i + 1 < gs.nd; i++) gs.d[i] = 1;
        modules_.back().gate = g.input(key + ".gate", dt, gs);
        g.set_name(modules_.back().gate, key + ".gate");
        h = gl::mul(g, h, modules_.back().gate);
    }
    h = gl::linear(g, h, gl::cast(g, m.up, dt));
    return gl::add(g, y, gl::scale(g, h, m.scale(cfg_.multiplier)));
}

const LoraModule* LoraNetwork::find(const std::string& key) const {
    for (const LoraModule& m : modules_)
        if (m.key == key) return &m;
    return nullptr;
}

std::vector<ValueId> LoraNetwork::parameters() const {
    std::vector<ValueId> p;
    for (const LoraModule& m : modules_) {
        p.push_back(m.down);
        p.push_back(m.up);
    }
    return p;
}

void LoraNetwork::init(gl::Runtime& rt, uint64_t seed) const {
    std::mt19937_64 rng(seed);
    for (const LoraModule& m : modules_) {
        // kaiming_uniform_(a = sqrt 5): gain sqrt(2 / (1 + a^2)) = sqrt(1/3), bound gain *
        // sqrt(3 / fan_in) = 1 / sqrt(fan_in).
        // fan_in of a conv is in * k * k.
        const int64_t fan_in = m.in * m.k * m.k;
        const float bound = 1.0f / std::sqrt(float(fan_in));
        std::uniform_real_distribution<float> u(-bound, bound);
        std::vector<float> d(size_t(m.rank * fan_in));
        for (float& e : d) e = u(rng);
        rt.write_f32(m.down, d);
        rt.write_f32(m.up, std::vector<float>(size_t(m.out * m.rank), 0.0f));
    }
}

void LoraNetwork::sample_dropout(gl::Runtime& rt, uint64_t seed, bool training) const {
    std::mt19937_64 rng(seed);
    if (dropout_seed_ != gl::kNoValue) {
        GL_CHECK(training, "lora: this network's graph has network dropout (", cfg_.dropout,
                 ") built in, which cannot be switched off; build evaluation graphs from a network without it");
        const int32_t s = int32_t(uint32_t(rng()));
        rt.write(dropout_seed_, &s, gl::DType::i32);
    }
    if (!cfg_.has_gates()) return;
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    const gl::Graph& g = rt.plan().graph;
    for (const LoraModule& m : modules_) {
        const int64_t n = g.shape(m.gate).numel(), r = m.rank;
        std::vector<float> gate(size_t(n), 1.0f);
        if (training) {
            const bool skip = cfg_.module_dropout > 0.0f && u(rng) < cfg_.module_dropout;
            const float keep_scale = 1.0f / (1.0f - cfg_.rank_dropout);
            for (int64_t i = 0; i < n; i++) {
                if (skip) gate[size_t(i)] = 0.0f;
                else if (cfg_.rank_dropout > 0.0f) gate[size_t(i)] = u(rng) >= cfg_.rank_dropout ? keep_scale : 0.0f;
            }
        }
        GL_CHECK(n % r == 0, "lora: gate of ", m.key, " is not a multiple of its rank");
        rt.write_f32(m.gate, gate);
    }
}

size_t merge_into(const LoraNetwork& net, const gl::Runtime& lora_rt, Part part, const nn::Weights& base,
                  gl::Runtime& base_rt) {
    size_t changed = 0;
    for (const LoraModule& m : net.modules()) {
        if (m.part != part) continue;
        const std::string wname = m.path + ".weight";
        const nn::WeightEntry* e = nullptr;
        for (const nn::WeightEntry& x : base.entries())
            if (x.name == wname) e = &x;
        GL_CHECK(e != nullptr, "lora merge: the base model has no weight ", wname, " for ", m.key);
        GL_CHECK(e->scale == gl::kNoValue, "lora merge: ", wname, " is stored quantized; merging needs dense base weights");
        const gl::Shape ws = base_rt.plan().graph.shape(e->id);
        // Linear [out, in]; conv [out, k, k, in], the same element order as down [r, k, k, in].
        const int64_t inner = m.in * m.k * m.k;
        GL_CHECK(ws.numel() == m.out * inner && ws[0] == m.out && ws.last() == m.in, "lora merge: ", wname, " is ",
                 ws.str(), ", which ", m.key, " (", m.out, " x ", inner, ") does not fit");
        const float s = m.scale(net.config().multiplier);
        const int64_t r = m.rank;
        std::vector<float> w = base_rt.read_f32(e->id);
        const std::vector<float> down = lora_rt.read_f32(m.down), up = lora_rt.read_f32(m.up);
        for (int64_t o = 0; o < m.out; o++)
            for (int64_t i = 0; i < inner; i++) {
                double acc = 0.0;
                for (int64_t k = 0; k < r; k++) acc += double(up[size_t(o * r + k)]) * down[size_t(k * inner + i)];
                w[size_t(o * inner + i)] += float(s * acc);
            }
        base_rt.write_f32(e->id, w);
        changed++;
    }
    return changed;
}

}  // namespace lora
