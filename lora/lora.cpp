#include "lora/lora.h"

#include <cmath>
#include <random>

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/runtime.h"
#include "lora/file_modules.h"

namespace lora {

using gl::ValueId;

const ModuleType& LoraConfig::module_type() const { return type ? *type : *module_types().front(); }

Targets LoraConfig::targets() const {
    if (!lycoris()) return kohya_targets(locon());
    const std::optional<Targets> t = lycoris_preset(*family, preset);
    GL_CHECK(t.has_value(), "lora: unknown LyCORIS preset '", preset, "'");
    return *t;
}

LoraNetwork::LoraNetwork(LoraConfig cfg) : cfg_(std::move(cfg)) {
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
    GL_CHECK(cfg_.family != nullptr, "lora: no model family");
    const size_t blocks = cfg_.block_dims.size(), family_blocks = size_t(cfg_.family->lora_blocks().size());
    GL_CHECK(cfg_.block_alphas.size() == blocks && (blocks == 0 || blocks == family_blocks) &&
                 (cfg_.conv_block_dims.empty() || cfg_.conv_block_dims.size() == blocks) &&
                 cfg_.conv_block_alphas.size() == cfg_.conv_block_dims.size() &&
                 (cfg_.block_lr_weights.empty() || cfg_.block_lr_weights.size() == family_blocks),
             "lora: the block-wise dims, alphas and lr weights must hold one value per block of the family's ",
             family_blocks, " (block_dims ", blocks, ", block_alphas ", cfg_.block_alphas.size(),
             ", conv_block_dims ", cfg_.conv_block_dims.size(), ", conv_block_alphas ", cfg_.conv_block_alphas.size(),
             ", lr weights ", cfg_.block_lr_weights.size(), ")");
    for (size_t i = 0; i < blocks; i++)
        GL_CHECK(cfg_.block_dims[i] >= 0 && std::isfinite(cfg_.block_alphas[i]) && cfg_.block_alphas[i] >= 0.0f &&
                     (cfg_.conv_block_dims.empty() ||
                      (cfg_.conv_block_dims[i] >= 0 && std::isfinite(cfg_.conv_block_alphas[i]) &&
                       cfg_.conv_block_alphas[i] >= 0.0f)),
                 "lora: block ", i, "'s dims and alphas must be >= 0");
    for (double w : cfg_.block_lr_weights)
        GL_CHECK(std::isfinite(w) && w >= 0.0, "lora: a block lr weight must be finite and >= 0, got ", w);
    for (const auto& r : {cfg_.loraplus_unet, cfg_.loraplus_text_encoder})
        GL_CHECK(!r || (std::isfinite(*r) && *r >= 0.0), "lora: a LoRA+ ratio must be finite and >= 0, got ", *r);
    GL_CHECK(!cfg_.lycoris() || (blocks == 0 && cfg_.block_lr_weights.empty() && !cfg_.loraplus_unet &&
                                 !cfg_.loraplus_text_encoder),
             "lora: block-wise dims, lr weights and LoRA+ are networks.lora's");
    GL_CHECK(!cfg_.lycoris() || cfg_.from_file || lycoris_preset(*cfg_.family, cfg_.preset).has_value(),
             "lora: unknown LyCORIS preset '", cfg_.preset, "'");
}

void LoraNetwork::attach_unet(nn::Weights& w) {
    w.linear_hook = [this](gl::Graph& g, const nn::Weights::LayerCall& c) {
        return apply(g, Part::unet, c, cfg_.family->unet_linear_kind(c.module));
    };
    w.conv_hook = [this](gl::Graph& g, const nn::Weights::LayerCall& c) {
        // A 1x1 stride-1 conv on NHWC is a Linear over channels (conv_shortcut).
        const bool pointwise = c.k == 1 && c.stride == 1 && c.pad == 0;
        return apply(g, Part::unet, c, pointwise ? ModuleKind::conv1x1 : ModuleKind::conv);
    };
}

void LoraNetwork::attach_text_encoder(nn::Weights& w) {
    w.linear_hook = [this](gl::Graph& g, const nn::Weights::LayerCall& c) {
        return apply(g, Part::text_encoder, c, ModuleKind::linear);
    };
}

std::unique_ptr<Module> LoraNetwork::make_module(const Layer& l) const {
    ModuleSettings s;
    s.kohya_dropouts = !cfg_.lycoris();
    s.rank_dropout = cfg_.rank_dropout;
    s.module_dropout = cfg_.module_dropout;
    s.dropout = cfg_.dropout;
    s.rank_dropout_scale = cfg_.rank_dropout_scale;
    if (cfg_.from_file) return cfg_.from_file->module(l, s);
    if (!cfg_.targets().covers(*cfg_.family, l.part, l.path)) return nullptr;
    const bool conv = l.kind == ModuleKind::conv;
    if (conv && (!cfg_.locon() || !cfg_.targets().conv)) return nullptr;
    s.rank = conv ? cfg_.conv_dim : cfg_.rank;
    s.alpha = conv ? cfg_.effective_conv_alpha() : cfg_.effective_alpha();
    if (l.part == Part::unet && !cfg_.block_dims.empty()) {
        // kohya's block_dims: the block's rank and alpha (its convs' without conv_block_dims: none).
        const int b = cfg_.family->lora_block(l.path);
        GL_CHECK(b >= 0 && size_t(b) < cfg_.block_dims.size(), "lora: ", l.key, " lies in none of the ",
                 cfg_.block_dims.size(), " blocks block_dims holds");
        if (conv && cfg_.conv_block_dims.empty()) return nullptr;
        s.rank = conv ? cfg_.conv_block_dims[size_t(b)] : cfg_.block_dims[size_t(b)];
        s.alpha = conv ? cfg_.conv_block_alphas[size_t(b)] : cfg_.block_alphas[size_t(b)];
    }
    if (s.rank == 0) return nullptr;
    s.dora = cfg_.dora;
    s.dora_on_output = cfg_.dora_on_output;
    s.tucker = cfg_.tucker;
    s.own = cfg_.type_args;
    return cfg_.module_type().make(l, s);
}

ValueId LoraNetwork::apply(gl::Graph& g, Part part, const nn::Weights::LayerCall& c, ModuleKind kind) {
    Layer l;
    l.family = cfg_.family;
    l.part = part;
    l.path = c.module;
    l.key = kohya_key(*cfg_.family, part, c.module);
    l.kind = kind;
    l.in = g.shape(c.x).last();
    l.out = g.shape(c.y).last();
    if (kind == ModuleKind::conv) l.k = c.k, l.stride = c.stride, l.pad = c.pad;
    std::unique_ptr<Module> m = make_module(l);
    if (!m) return c.y;
    GL_CHECK(graph_ == nullptr || graph_ == &g, "lora: ", c.module, ": the network's parameters live in another graph");
    graph_ = &g;
    GL_CHECK(find(l.key) == nullptr, "lora: module ", c.module, " was built twice (one network serves one graph build)");
    modules_.push_back(std::move(m));
    BuildEnv env;
    env.multiplier = cfg_.multiplier;
    env.index = uint64_t(modules_.size());  // one-based: each module's network-dropout masks apart
    env.dropout_seed = [this, &g] {
        // One seed input for the network, written per step by sample_dropout().
        if (dropout_seed_ == gl::kNoValue) {
            dropout_seed_ = g.input("lora.dropout_seed", gl::DType::i32, gl::Shape{});
            g.set_name(dropout_seed_, "lora.dropout_seed");
        }
        return dropout_seed_;
    };
    return modules_.back()->build(g, c, env);
}

const Module* LoraNetwork::find(const std::string& key) const {
    for (const std::unique_ptr<Module>& m : modules_)
        if (m->key() == key) return m.get();
    return nullptr;
}

std::vector<ValueId> LoraNetwork::parameters() const {
    std::vector<ValueId> p;
    for (const std::unique_ptr<Module>& m : modules_)
        for (const Tensor& t : m->tensors()) p.push_back(t.id);
    return p;
}

std::string LoraNetwork::title() const {
    std::string t;
    bool dora = false;
    for (const std::unique_ptr<Module>& m : modules_) {
        const std::string n = m->type().title();
        if (t.find(n) == std::string::npos) t += (t.empty() ? "" : "/") + n;
        dora = dora || m->settings().dora;
    }
    if (t.empty()) return std::string(cfg_.module_type().title()) + (cfg_.dora ? " DoRA" : "");
    return t + (dora ? " DoRA" : "");
}

void LoraNetwork::init(gl::Runtime& rt, uint64_t seed) const {
    std::mt19937_64 rng(seed);
    const WriteFn write = [&rt](ValueId v, const std::vector<float>& x) { rt.write_f32(v, x); };
    const ReadFn read = [&rt](ValueId v) { return rt.read_f32(v); };
    for (const std::unique_ptr<Module>& m : modules_) m->init(write, read, rng);
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
    const WriteFn write = [&rt](ValueId v, const std::vector<float>& x) { rt.write_f32(v, x); };
    for (const std::unique_ptr<Module>& m : modules_) m->sample_gates(write, rt.plan().graph, rng, training);
}

size_t merge_into(const LoraNetwork& net, const gl::Runtime& lora_rt, Part part, const nn::Weights& base,
                  gl::Runtime& base_rt) {
    size_t changed = 0;
    const ReadFn read = [&lora_rt](ValueId v) { return lora_rt.read_f32(v); };
    for (const Module& m : net.modules()) {
        const Layer& l = m.layer();
        if (l.part != part) continue;
        const std::string wname = l.path + ".weight";
        const nn::WeightEntry* e = nullptr;
        for (const nn::WeightEntry& x : base.entries())
            if (x.name == wname) e = &x;
        GL_CHECK(e != nullptr, "lora merge: the base model has no weight ", wname, " for ", m.key());
        GL_CHECK(e->scale == gl::kNoValue, "lora merge: ", wname, " is stored quantized; merging needs dense base weights");
        const gl::Shape ws = base_rt.plan().graph.shape(e->id);
        // Linear [out, in]; conv [out, k, k, in] (a 1x1 conv's [out, 1, 1, in] holds [out, in]).
        const int64_t inner = l.fan_in();
        GL_CHECK(ws.numel() == l.out * inner && ws[0] == l.out && ws.last() == l.in, "lora merge: ", wname, " is ",
                 ws.str(), ", which ", m.key(), " (", l.out, " x ", inner, ") does not fit");
        std::vector<float> w = base_rt.read_f32(e->id);
        m.merge(w, read, net.config().multiplier);
        base_rt.write_f32(e->id, w);
        changed++;
    }
    return changed;
}

}  // namespace lora
