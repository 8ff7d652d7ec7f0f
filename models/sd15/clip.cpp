#include "models/sd15/clip.h"

#include <cstring>
#include <set>
#include <utility>

#include "ggml-lite/core/error.h"
#include "models/nn/layers.h"

namespace sd {

using gl::Graph;
using gl::ValueId;

namespace {

void check_config(const ClipConfig& c) {
    GL_CHECK(c.vocab > 0 && c.width > 0 && c.layers > 0 && c.heads > 0 && c.mlp > 0 && c.max_pos > 0,
             "clip: config sizes must be positive");
    GL_CHECK(c.width % c.heads == 0, "clip: width ", c.width, " is not a multiple of heads ", c.heads);
}

// One pre-LN encoder layer: x + attn(ln1(x)), then + mlp(ln2(.)). x [N, L, D].
ValueId encoder_layer(nn::Weights& w, Graph& g, ValueId x, const ClipConfig& c) {
    ValueId h = nn::layer_norm(w, "layer_norm1", x, c.eps);
    h = nn::attention(w, "self_attn", h, h,
                      {.heads = c.heads, .qkv_bias = true, .causal = true, .q = "q_proj", .k = "k_proj",
                       .v = "v_proj", .out = "out_proj"});
    x = gl::add(g, x, h);
    h = nn::layer_norm(w, "layer_norm2", x, c.eps);
    {
        nn::Scope sc(w, "mlp");
        h = nn::activation(g, nn::linear(w, "fc1", h, c.mlp), c.act);
        h = nn::linear(w, "fc2", h, c.width);
    }
    return gl::add(g, x, h);
}

// The text encoder's layers leave their values to the enclosing scope ("...self_attn.linear"),
// the names its graphs have always had (see Weights::layer_value_scopes).
class BlockValueNames {
public:
    explicit BlockValueNames(nn::Weights& w) : w_(w), saved_(std::exchange(w.layer_value_scopes, false)) {}
    ~BlockValueNames() { w_.layer_value_scopes = saved_; }
    BlockValueNames(const BlockValueNames&) = delete;
    BlockValueNames& operator=(const BlockValueNames&) = delete;

private:
    nn::Weights& w_;
    bool saved_;
};

ValueId encode(nn::Weights& w, Graph& g, ValueId ids, ValueId embeds, const ClipConfig& c, int clip_skip) {
    check_config(c);
    GL_CHECK(clip_skip >= 1 && clip_skip <= c.layers, "clip: clip_skip ", clip_skip, " must be in 1..", c.layers,
             " (1 = last layer)");
    GL_CHECK(&g == &w.graph(), "clip: the weights belong to another graph");
    BlockValueNames names(w);
    nn::Scope top(w, "text_model");
    ValueId x;
    {
        nn::Scope es(w, "embeddings");
        int64_t L = 0;
        if (ids != gl::kNoValue) {
            const gl::Shape s = g.shape(ids);
            GL_CHECK(s.nd == 2 && g.dtype(ids) == gl::DType::i32, "clip: ids must be i32 [N, L], got ",
                     g.describe(ids));
            L = s[1];
            x = gl::embedding(g, w.get("token_embedding.weight", {c.vocab, c.width}), ids);
        } else {
            const gl::Shape s = g.shape(embeds);
            GL_CHECK(s.nd == 3 && s[2] == c.width, "clip: inputs_embeds must be [N, L, ", c.width, "], got ",
                     g.describe(embeds));
            L = s[1];
            x = embeds;
        }
        GL_CHECK(L >= 1 && L <= c.max_pos, "clip: sequence length ", L, " must be in 1..", c.max_pos);
        // Positions 0..L-1 are the table's first L rows; [L, D] broadcasts over the batch.
        ValueId pos = w.get("position_embedding.weight", {c.max_pos, c.width});
        x = gl::add(g, x, gl::slice(g, pos, 0, 0, L));
    }
    const int64_t run = c.layers - (clip_skip - 1);
    for (int64_t i = 0; i < run; i++) {
        const std::string name = gl::cat("encoder.layers.", i);
        nn::Block layer(w, name);  // segment "text_model.encoder.layers.i"
        x = encoder_layer(w, g, x, c);
    }
    return nn::layer_norm(w, "final_layer_norm", x, c.eps);
}

}  // namespace

ValueId build_clip(nn::Weights& w, Graph& g, ValueId ids, const ClipConfig& cfg, int clip_skip) {
    return encode(w, g, ids, gl::kNoValue, cfg, clip_skip);
}

ValueId build_clip_from_embeds(nn::Weights& w, Graph& g, ValueId inputs_embeds, const ClipConfig& cfg, int clip_skip) {
    return encode(w, g, gl::kNoValue, inputs_embeds, cfg, clip_skip);
}

ValueId join_clip_chunks(Graph& g, ValueId hidden, int n_chunks) {
    const gl::Shape s = g.shape(hidden);
    GL_CHECK(s.nd == 3 && n_chunks >= 1 && s[0] % n_chunks == 0, "clip: cannot join ", g.describe(hidden), " as ",
             n_chunks, " chunks per prompt");
    const int64_t L = s[1], D = s[2], B = s[0] / n_chunks;
    GL_CHECK(L >= 3, "clip: chunks of ", L, " tokens hold no inner tokens");
    if (n_chunks == 1) return hidden;
    ValueId rows = gl::reshape(g, hidden, {B, n_chunks * L, D});
    std::vector<ValueId> parts{gl::slice(g, rows, 1, 0, 1)};  // the first chunk's <BOS>
    for (int k = 0; k < n_chunks; k++) parts.push_back(gl::slice(g, rows, 1, k * L + 1, L - 2));
    parts.push_back(gl::slice(g, rows, 1, n_chunks * L - 1, 1));  // the last chunk's final token
    return gl::concat(g, parts, 1);
}

ValueId build_clip_chunked(nn::Weights& w, Graph& g, ValueId ids, int n_chunks, const ClipConfig& cfg, int clip_skip) {
    return join_clip_chunks(g, build_clip(w, g, ids, cfg, clip_skip), n_chunks);
}

// ---------------- checkpoint layouts ----------------

namespace {

constexpr const char* kInternalPrefix = "text_model.";
constexpr const char* kOriginalPrefix = "cond_stage_model.transformer.";

// The prefix every text encoder key carries in layout l.
std::string layout_prefix(ClipLayout l) {
    switch (l) {
        case ClipLayout::transformers: return kInternalPrefix;
        case ClipLayout::transformers_flat: return "";
        case ClipLayout::original: return std::string(kOriginalPrefix) + kInternalPrefix;
        case ClipLayout::original_older: return kOriginalPrefix;
    }
    gl::fail("clip: unknown layout ", int(l));
}

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

// The part of src that belongs to the text encoder, minus what a loader should not see as
// "unexpected": the position_ids buffer and the layers clip_skip leaves unbuilt.
class ClipView : public gl::io::TensorSource {
public:
    ClipView(const gl::io::TensorSource& src, ClipLayout l, const nn::Weights& w)
        : src_(src), prefix_(layout_prefix(l)) {
        std::set<std::string> built_layers;
        for (const nn::WeightEntry& e : w.entries())
            if (starts_with(e.name, kInternalPrefix)) built_layers.insert(layer_of(e.name.substr(strlen(kInternalPrefix))));
        for (const gl::io::TensorInfo& t : src.list()) {
            if (!starts_with(t.name, prefix_)) continue;
            const std::string rest = t.name.substr(prefix_.size());
            if (rest == "embeddings.position_ids") continue;
            const std::string layer = layer_of(rest);
            if (!layer.empty() && !built_layers.count(layer)) continue;
            keep_.insert(t.name);
        }
    }
    std::string origin() const override { return src_.origin(); }
    std::vector<gl::io::TensorInfo> list() const override {
        std::vector<gl::io::TensorInfo> out;
        for (const gl::io::TensorInfo& t : src_.list())
            if (keep_.count(t.name)) out.push_back(t);
        return out;
    }
    bool has(const std::string& name) const override { return keep_.count(name) != 0; }
    gl::io::TensorInfo info(const std::string& name) const override { return src_.info(name); }
    void read(const std::string& name, void* dst, gl::DType to) const override { src_.read(name, dst, to); }

private:
    // "encoder.layers.3.mlp.fc1.weight" -> "encoder.layers.3."; "" for keys outside the layers.
    static std::string layer_of(const std::string& rest) {
        const std::string p = "encoder.layers.";
        if (!starts_with(rest, p)) return "";
        size_t dot = rest.find('.', p.size());
        return dot == std::string::npos ? "" : rest.substr(0, dot + 1);
    }
    const gl::io::TensorSource& src_;
    std::string prefix_;
    std::set<std::string> keep_;
};

}  // namespace

const char* clip_layout_name(ClipLayout l) {
    switch (l) {
        case ClipLayout::transformers: return "transformers";
        case ClipLayout::transformers_flat: return "transformers (without text_model.)";
        case ClipLayout::original: return "original";
        case ClipLayout::original_older: return "original (without text_model.)";
    }
    return "?";
}

std::string clip_key(ClipLayout l, const std::string& internal) {
    GL_CHECK(starts_with(internal, kInternalPrefix), "clip: internal name '", internal, "' does not start with ",
             kInternalPrefix);
    return layout_prefix(l) + internal.substr(strlen(kInternalPrefix));
}

ClipLayout detect_clip_layout(const gl::io::TensorSource& src) {
    const std::string probe = "embeddings.token_embedding.weight";
    for (ClipLayout l : {ClipLayout::transformers, ClipLayout::original, ClipLayout::original_older,
                         ClipLayout::transformers_flat})
        if (src.has(layout_prefix(l) + probe)) return l;
    gl::fail(src.origin(), ": no CLIP text encoder found (looked for ", probe, " at the top and under ",
             kInternalPrefix, ", ", kOriginalPrefix, kInternalPrefix, " and ", kOriginalPrefix, ")");
}

nn::LoadReport load_clip(const nn::Weights& w, const gl::io::TensorSource& src, gl::Runtime& rt) {
    const ClipLayout l = detect_clip_layout(src);
    ClipView view(src, l, w);
    return nn::load_weights(w, view, [l](const std::string& name) { return clip_key(l, name); }, rt);
}

}  // namespace sd
