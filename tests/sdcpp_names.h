// stable-diffusion.cpp's LoRA loader for SD1.x / SD2.x, modelled on its source (leejet/
// stable-diffusion.cpp at 97d2990, 2026-08-19): src/name_conversion.cpp (convert_tensor_name,
// convert_sep_to_dot, convert_diffusers_unet_to_original_sd1, convert_open_clip_to_hf_clip_name),
// src/model/adapter/lora.hpp (get_weight_diff and its get_lora / get_raw / get_loha /
// get_lokr_weight_diff, build_lora_graph, stat) and src/core/ggml_extend.hpp (ggml_ext_merge_lora,
// ggml_ext_mul_n_mode, ggml_ext_kronecker), with ggml's shape rules for the ops they use
// (ggml_mul_mat asserts a->ne[0] == b->ne[0]; an assert aborts the process).
// Shared by test_sd2_loaders.cpp and test_lycoris_files.cpp. It models names and shapes (which
// tensors apply to which model tensor, with what element count), not values; the immediate
// apply mode (merge into the weights), not the at-runtime one (get_out_diff). The names and update
// shapes are checked against sd.cpp's own code's (tests/golden/make_sdcpp_names.py ->
// tests/golden/data/lycoris/sdcpp.json, in test_lycoris_files.cpp).
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ggml-lite/core/error.h"

namespace sdcpp {

using Shapes = std::map<std::string, std::vector<int64_t>>;  // name -> PyTorch shape

inline bool ends_with(const std::string& s, const std::string& e) {
    return s.size() >= e.size() && s.compare(s.size() - e.size(), e.size(), e) == 0;
}
inline bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

// convert_sep_to_dot: "_" -> "." except inside the protected tokens.
inline std::string sep_to_dot(std::string name) {
    static const std::vector<std::string> kProtected = {
        "self_attn",     "out_proj",        "q_proj",        "k_proj",        "v_proj",
        "to_k",          "to_q",            "to_v",          "to_out",        "text_model",
        "down_blocks",   "mid_block",       "up_block",      "proj_in",       "proj_out",
        "transformer_blocks", "single_transformer_blocks", "single_blocks", "diffusion_model",
        "cond_stage_model", "first_stage_model", "conv_in", "conv_out",      "lora_down",
        "lora_mid",      "lora_up",         "diff_b",        "hada_w1_a",     "hada_w1_b",
        "hada_w2_a",     "hada_w2_b",       "hada_t1",       "hada_t2",       ".lokr_w1",
        ".lokr_w1_a",    ".lokr_w1_b",      ".lokr_w2",      ".lokr_w2_a",    ".lokr_w2_b",
        "time_emb_proj", "conv_shortcut",   "time_embedding", "conv_norm_out", "double_blocks",
        "txt_attn",      "img_attn",        "input_blocks",  "output_blocks", "middle_block",
        "skip_connection", "emb_layers",    "in_layers",     "out_layers",    "add_q_proj",
        "add_k_proj",    "add_v_proj",      "add_out_proj",  "ff_context",    "norm_added_q",
        "norm_added_v",  "to_add_out",      "txt_mod",       "img_mod",       "txt_mlp",
        "img_mlp",       "proj_mlp",        "wi_0",          "wi_1",          "norm1_context",
        "x_embedder",    "cross_attn",      "output_proj",   "token_refiner"};
    std::set<size_t> keep;
    for (const std::string& t : kProtected)
        for (size_t at = name.find(t); at != std::string::npos; at = name.find(t, at + t.size()))
            for (size_t u = t.find('_'); u != std::string::npos; u = t.find('_', u + 1)) keep.insert(at + u);
    for (size_t i = 0; i < name.size(); i++)
        if (name[i] == '_' && !keep.count(i)) name[i] = '.';
    return name;
}

// convert_diffusers_unet_to_original_sd1 (SD1.x and SD2.x). The first table is matched against
// the whole name, so a LoRA tensor's name (".weight.lora_up", ...) never converts there.
inline std::string unet_to_original(std::string name) {
    static const std::vector<std::pair<std::string, std::string>> kWhole = {
        {"time_embed.0.weight", "time_embedding.linear_1.weight"}, {"time_embed.0.bias", "time_embedding.linear_1.bias"},
        {"time_embed.2.weight", "time_embedding.linear_2.weight"}, {"time_embed.2.bias", "time_embedding.linear_2.bias"},
        {"input_blocks.0.0.weight", "conv_in.weight"},             {"input_blocks.0.0.bias", "conv_in.bias"},
        {"out.0.weight", "conv_norm_out.weight"},                  {"out.0.bias", "conv_norm_out.bias"},
        {"out.2.weight", "conv_out.weight"},                       {"out.2.bias", "conv_out.bias"}};
    static const std::vector<std::pair<std::string, std::string>> kResnet = {
        {"in_layers.0", "norm1"}, {"in_layers.2", "conv1"},        {"out_layers.0", "norm2"},
        {"out_layers.3", "conv2"}, {"emb_layers.1", "time_emb_proj"}, {"skip_connection", "conv_shortcut"}};
    static const std::vector<std::pair<std::string, std::string>> kLayer = [] {
        std::vector<std::pair<std::string, std::string>> v;  // (original, diffusers), in sd.cpp's order
        using gl::cat;
        for (int i = 0; i < 4; i++) {
            for (int j = 0; j < 2; j++) {
                v.emplace_back(cat("input_blocks.", 3 * i + j + 1, ".0."), cat("down_blocks.", i, ".resnets.", j, "."));
                if (i < 3)
                    v.emplace_back(cat("input_blocks.", 3 * i + j + 1, ".1."), cat("down_blocks.", i, ".attentions.", j, "."));
            }
            for (int j = 0; j < 3; j++) {
                v.emplace_back(cat("output_blocks.", 3 * i + j, ".0."), cat("up_blocks.", i, ".resnets.", j, "."));
                v.emplace_back(cat("output_blocks.", 3 * i + j, ".1."), cat("up_blocks.", i, ".attentions.", j, "."));
            }
            if (i < 3) {
                v.emplace_back(cat("input_blocks.", 3 * (i + 1), ".0.op."), cat("down_blocks.", i, ".downsamplers.0.conv."));
                v.emplace_back(cat("output_blocks.", 3 * i + 2, ".", i == 0 ? 1 : 2, "."), cat("up_blocks.", i, ".upsamplers.0."));
            }
        }
        v.emplace_back("middle_block.1.", "mid_block.attentions.0.");
        for (int j = 0; j < 2; j++) v.emplace_back(cat("middle_block.", 2 * j, "."), cat("mid_block.resnets.", j, "."));
        return v;
    }();
    for (const auto& [sd, hf] : kWhole)
        if (name == hf) return sd;
    auto replace_first = [&](const std::string& from, const std::string& to) {
        const size_t at = name.find(from);
        if (at != std::string::npos) name.replace(at, from.size(), to);
    };
    if (name.find("resnets") != std::string::npos)
        for (const auto& [sd, hf] : kResnet) replace_first(hf, sd);
    for (const auto& [sd, hf] : kLayer) replace_first(hf, sd);
    replace_first("to_out.weight", "to_out.0.weight");
    replace_first("to_out.bias", "to_out.0.bias");
    return name;
}

// convert_open_clip_to_hf_clip_name for a text resblock's tensors (the ones SD2.x's tower has);
// other names (transformers' CLIP names, SD1.x's) pass unchanged.
inline std::string open_clip_name(const std::string& name) {
    static const std::map<std::string, std::string> kResblock = {
        {"attn.in_proj_bias", "self_attn.in_proj.bias"}, {"attn.in_proj_weight", "self_attn.in_proj.weight"},
        {"attn.out_proj.bias", "self_attn.out_proj.bias"}, {"attn.out_proj.weight", "self_attn.out_proj.weight"},
        {"ln_1.bias", "layer_norm1.bias"},               {"ln_1.weight", "layer_norm1.weight"},
        {"ln_2.bias", "layer_norm2.bias"},               {"ln_2.weight", "layer_norm2.weight"},
        {"mlp.c_fc.bias", "mlp.fc1.bias"},               {"mlp.c_fc.weight", "mlp.fc1.weight"},
        {"mlp.c_proj.bias", "mlp.fc2.bias"},             {"mlp.c_proj.weight", "mlp.fc2.weight"}};
    const std::string p = "model.transformer.resblocks.";
    if (!starts_with(name, p)) return name;
    const std::string rest = name.substr(p.size()), idx = rest.substr(0, rest.find('.'));
    auto it = kResblock.find(rest.substr(idx.size() + 1));
    return it == kResblock.end() ? name : "transformer.text_model.encoder.layers." + idx + "." + it->second;
}

// convert_tensor_name for a LoRA file's tensor (the loader prefixes "lora." to each name), SD1.x /
// SD2.x (UNet versions: convert_sep_to_dot always runs).
inline std::string lora_name(const std::string& key) {
    std::string name = "lora." + key;
    for (const char* p : {"lora.lora.", "lora.lora_", "lora.lycoris_", "lora.lycoris.", "lora."})
        if (starts_with(name, p)) {
            name = name.substr(std::string(p).size());
            break;
        }
    // lora_suffix_map, a std::map: the first suffix in key order that ends the name. No entry for
    // ".dora_scale" or ".lokr_t2".
    static const std::map<std::string, std::string> kSuffix = {
        {".lora_down.weight", ".weight.lora_down"}, {".lora_mid.weight", ".weight.lora_mid"},
        {".lora_up.weight", ".weight.lora_up"},     {".lora.down.weight", ".weight.lora_down"},
        {".lora.mid.weight", ".weight.lora_mid"},   {".lora.up.weight", ".weight.lora_up"},
        {"_lora.down.weight", ".weight.lora_down"}, {"_lora.mid.weight", ".weight.lora_mid"},
        {"_lora.up.weight", ".weight.lora_up"},     {".lora_A.weight", ".weight.lora_down"},
        {".lora_B.weight", ".weight.lora_up"},      {".lora_A.default.weight", ".weight.lora_down"},
        {".lora_B.default.weight", ".weight.lora_up"}, {".lora_A", ".weight.lora_down"},
        {".lora_B", ".weight.lora_up"},             {".lora_linear", ".weight.alpha"},
        {".alpha", ".weight.alpha"},                {".scale", ".weight.scale"},
        {".diff", ".weight.diff"},                  {".diff_b", ".bias.diff"},
        {".hada_w1_a", ".weight.hada_w1_a"},        {".hada_w1_b", ".weight.hada_w1_b"},
        {".hada_w2_a", ".weight.hada_w2_a"},        {".hada_w2_b", ".weight.hada_w2_b"},
        {".hada_t1", ".weight.hada_t1"},            {".hada_t2", ".weight.hada_t2"},
        {".lokr_w1", ".weight.lokr_w1"},            {".lokr_w1_a", ".weight.lokr_w1_a"},
        {".lokr_w1_b", ".weight.lokr_w1_b"},        {".lokr_w2", ".weight.lokr_w2"},
        {".lokr_w2_a", ".weight.lokr_w2_a"},        {".lokr_w2_b", ".weight.lokr_w2_b"}};
    for (const auto& [from, to] : kSuffix)
        if (ends_with(name, from)) {
            name.replace(name.size() - from.size(), from.size(), to);
            break;
        }
    name = sep_to_dot(name);
    // prefix_map (the entries a kohya SD name can start with).
    for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
             {"unet.", "model.diffusion_model."}, {"te.", "cond_stage_model.transformer."}})
        if (starts_with(name, from)) {
            name = to + name.substr(from.size());
            break;
        }
    const std::string unet = "model.diffusion_model.";
    if (starts_with(name, unet)) name = unet + unet_to_original(name.substr(unet.size()));
    const std::string te = "cond_stage_model.";
    if (starts_with(name, te)) name = te + open_clip_name(name.substr(te.size()));
    return "lora." + name;
}

// ---------------------------------------------------------------- ggml shapes

// A tensor's ggml ne (PyTorch's shape reversed, padded with 1s).
struct Ne {
    std::array<int64_t, 4> ne{1, 1, 1, 1};
    int64_t numel() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
    int n_dims() const {  // ggml_n_dims
        for (int i = 3; i >= 1; i--)
            if (ne[size_t(i)] > 1) return i + 1;
        return 1;
    }
    bool operator==(const Ne& o) const { return ne == o.ne; }
};
inline Ne ne_of(const std::vector<int64_t>& torch) {
    Ne r;
    for (size_t i = 0; i < torch.size() && i < 4; i++) r.ne[i] = torch[torch.size() - 1 - i];
    return r;
}
// Where ggml would assert (GGML_ASSERT aborts the whole process).
struct Abort {
    std::string what;
};
inline Ne ne2(int64_t a, int64_t b) { return Ne{{a, b, 1, 1}}; }
inline Ne transpose(Ne a) {
    std::swap(a.ne[0], a.ne[1]);
    return a;
}
inline Ne mul_mat(const Ne& a, const Ne& b) {  // ggml_mul_mat's ggml_can_mul_mat
    if (a.ne[0] != b.ne[0] || b.ne[2] % a.ne[2] != 0 || b.ne[3] % a.ne[3] != 0)
        throw Abort{"ggml_mul_mat: ne[0] " + std::to_string(a.ne[0]) + " vs " + std::to_string(b.ne[0])};
    return Ne{{a.ne[1], b.ne[1], b.ne[2], b.ne[3]}};
}
// ggml_ext_mul_n_mode(a, b, mode): a's axis `mode` (of size b.ne[0]) becomes b.ne[1].
inline Ne mul_n_mode(Ne a, const Ne& b, int mode) {
    std::swap(a.ne[0], a.ne[size_t(mode)]);
    const Ne r = transpose(mul_mat(ne2(a.ne[0], a.ne[1] * a.ne[2] * a.ne[3]), b));
    Ne out{{r.ne[0], a.ne[1], a.ne[2], a.ne[3]}};
    std::swap(out.ne[0], out.ne[size_t(mode)]);
    return out;
}
// ggml_ext_merge_lora(down, up, mid).
inline Ne merge_lora(const Ne& down, const Ne& up, const Ne* mid = nullptr) {
    const int64_t up_rows = up.ne[size_t(up.n_dims() - 1)];
    const Ne up2 = ne2(up.numel() / up_rows, up_rows);
    int dn = down.n_dims();
    dn += dn % 2;
    const int64_t down_rows = down.ne[size_t(dn - 1)];
    const Ne down_t = transpose(ne2(down.numel() / down_rows, down_rows));
    if (!mid) return transpose(mul_mat(up2, down_t));
    return mul_n_mode(mul_n_mode(*mid, down_t, 3), up2, 2);
}
// ggml_ext_kronecker: ggml_interpolate to a.ne * b.ne, then ggml_mul by b.
inline Ne kronecker(const Ne& a, const Ne& b) {
    Ne r;
    for (size_t i = 0; i < 4; i++) r.ne[i] = a.ne[i] * b.ne[i];
    return r;
}

// ---------------------------------------------------------------- applying a file

struct Result {
    std::map<std::string, std::string> applied;  // file key -> the model tensor it patches
    std::set<std::string> skipped;               // found for a model tensor, update of another size
    std::map<std::string, std::string> aborts;   // model tensor -> the assert its update's graph hits
    std::set<std::string> unused(const Shapes& file) const {
        std::set<std::string> u;
        for (const auto& [k, s] : file)
            if (!applied.count(k)) u.insert(k);
        return u;
    }
};

// build_lora_graph over `model` (each model tensor's name and PyTorch shape): get_weight_diff for
// every model tensor, then stat's accounting. A file tensor applies when its converted name is
// "lora.<model tensor>.<part>" of a complete LoRA / raw diff / LoHa / LoKr group, tried in that
// order, whose update has the model tensor's element count (or is the 2-D update get_weight_diff
// pads); everything else is "unused lora tensor". An assert stops the real process at the first
// such model tensor (std::map order); here every one is recorded, and its tensors count unused.
// (get_weight_diff also reads "<model tensor>.1", ".2", ... groups, which only
// preprocess_lora_tensors' fused q/k/v renaming makes: SDXL, not modelled.)
inline Result apply(const Shapes& file, const Shapes& model) {
    std::map<std::string, std::string> by_name;  // converted name -> file key
    for (const auto& [k, s] : file) by_name[lora_name(k)] = k;
    Result r;
    for (const auto& [tensor, shape] : model) {
        const std::string p = "lora." + tensor + ".";
        auto find = [&](const char* part) -> const std::string* {
            auto it = by_name.find(p + part);
            return it == by_name.end() ? nullptr : &it->second;
        };
        auto ne = [&](const std::string* k) { return ne_of(file.at(*k)); };
        std::vector<const std::string*> used;
        bool have = false;
        Ne diff;
        try {
            if (const std::string *up = find("lora_up"), *down = find("lora_down"); up && down) {
                const std::string* mid = find("lora_mid");
                used = {up, down};
                if (mid) used.push_back(mid);
                if (const std::string* s = find("scale"))
                    used.push_back(s);
                else if (const std::string* a = find("alpha"))
                    used.push_back(a);
                const Ne m = mid ? ne(mid) : Ne{};
                diff = merge_lora(ne(down), ne(up), mid ? &m : nullptr);
                have = true;
            } else if (const std::string* d = find("diff")) {
                used = {d};
                diff = ne(d);
                have = true;
            } else if (const std::string *b1 = find("hada_w1_b"), *a1 = find("hada_w1_a"), *b2 = find("hada_w2_b"),
                       *a2 = find("hada_w2_a");
                       b1 && a1 && b2 && a2) {
                const std::string *t1 = find("hada_t1"), *t2 = find("hada_t2");
                used = {b1, a1, b2, a2};
                for (const std::string* x : {t1, t2, find("alpha")})
                    if (x) used.push_back(x);
                const Ne m1 = t1 ? ne(t1) : Ne{}, m2 = t2 ? ne(t2) : Ne{};
                const Ne u1 = merge_lora(ne(b1), t1 ? transpose(ne(a1)) : ne(a1), t1 ? &m1 : nullptr);
                const Ne u2 = merge_lora(ne(b2), t2 ? transpose(ne(a2)) : ne(a2), t2 ? &m2 : nullptr);
                for (size_t i = 0; i < 4; i++)  // ggml_mul_inplace: u2 repeats to u1
                    if (u1.ne[i] % u2.ne[i] != 0) throw Abort{"ggml_mul: shapes"};
                diff = u1;
                have = true;
            } else {
                const std::string *w1 = find("lokr_w1"), *w1a = find("lokr_w1_a"), *w1b = find("lokr_w1_b"),
                                  *w2 = find("lokr_w2"), *w2a = find("lokr_w2_a"), *w2b = find("lokr_w2_b");
                // w1 (full or merged) before w2 is looked at, as get_lokr_weight_diff does.
                if (w1 || (w1a && w1b)) {
                    const Ne f1 = w1 ? ne(w1) : merge_lora(ne(w1b), ne(w1a));
                    if (w2 || (w2a && w2b)) {
                        const Ne f2 = w2 ? ne(w2) : merge_lora(ne(w2b), ne(w2a));
                        if (w1)
                            used.push_back(w1);
                        else
                            used.insert(used.end(), {w1a, w1b});
                        if (w2)
                            used.push_back(w2);
                        else
                            used.insert(used.end(), {w2a, w2b});
                        if (const std::string* a = find("alpha")) used.push_back(a);
                        diff = kronecker(f1, f2);
                        have = true;
                    }
                }
            }
        } catch (const Abort& a) {
            r.aborts[tensor] = a.what;
            continue;
        }
        if (!have) continue;
        const Ne m = ne_of(shape);
        if (diff.numel() < m.numel() && diff.n_dims() == 2 && m.n_dims() == 2 && diff.ne[0] == m.ne[0])
            diff.ne[1] = m.ne[1];  // "pad for": zeros appended along ne[1]
        for (const std::string* k : used)
            if (diff.numel() == m.numel())
                r.applied[*k] = tensor;
            else
                r.skipped.insert(*k);
    }
    return r;
}

}  // namespace sdcpp
