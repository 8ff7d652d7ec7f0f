// SD2.x LoRA files as the loaders read them. Four networks on SD2.x's UNet (sd::UnetConfig::sd2():
// Linear proj_in / proj_out) and text encoder (ViT-H/14's tower, 23 layers) -- networks.lora with and
// without the text encoder, networks.lora with conv_dim (LoCon), lycoris.kohya's LoHa -- are
// written by the real writer (lora::save_kohya), and then:
// - the file's keys and shapes are those kohya's networks.lora and LyCORIS's lycoris.kohya write on
//   kohya's own SD2.x models (tests/golden/make_sd2_lora_keys.py -> data/sd2/lora_keys.json);
// - ComfyUI (modelled on comfy/lora.py load_lora, model_lora_keys_unet / model_lora_keys_clip,
//   comfy/utils.py unet_to_diffusers, comfy/model_detection.py detect_unet_config, and SD20's
//   clip_h text model of 23 layers, supported_models.py / sd2_clip_config.json) takes every
//   tensor, and each patch lands on the model weight of the layer the module was trained on,
//   with the update's element count;
// - stable-diffusion.cpp (tests/sdcpp_names.h; leejet/stable-diffusion.cpp at 97d2990:
//   src/name_conversion.cpp convert_tensor_name, convert_sep_to_dot, convert_diffusers_unet_to_original_sd1,
//   convert_open_clip_to_hf_clip_name; src/model/adapter/lora.hpp get_*_weight_diff,
//   preprocess_lora_tensors; src/model/te/clip.hpp, src/conditioning/conditioner.hpp) applies
//   every UNet tensor of kohya's networks.lora, and what it leaves is named: for an SD2.x single
//   file its text encoder holds OpenCLIP's fused attn.in_proj (clip.hpp's proj_in), and
//   preprocess_lora_tensors renames q/k/v LoRA tensors onto it only for SDXL's second encoder
//   (cond_stage_model.1), so the text encoder's self_attn_q/k/v_proj tensors are unused there (a
//   diffusers folder keeps q/k/v split and they apply); and convert_diffusers_unet_to_original_sd1
//   maps conv_in, conv_out and time_embedding.linear_1/2 by whole-name equality, which a LoRA
//   tensor's name (".weight.lora_up", ".weight.hada_w1_a", ...) never has, so the modules LyCORIS's
//   full preset puts there are unused. kohya's own files have the same keys (the golden), so
//   these are the loader's, not ours.
// The SD2.x model the loaders patch is ours (LDM names from sd::unet_key_original, checked against
// diffusers' converter in test_sd2.cpp); on the golden tiny SD2.x checkpoint (diffusers' LDM file,
// OpenCLIP's tower) the same loaders land on the checkpoint's own tensor names and sizes.
#include <optional>
#include <set>

#include "lycoris_fixtures.h"
#include "models/family.h"
#include "sdcpp_names.h"

using namespace lyco_test;

namespace {

using Shapes = std::map<std::string, std::vector<int64_t>>;

bool ends_with(const std::string& s, const std::string& e) {
    return s.size() >= e.size() && s.compare(s.size() - e.size(), e.size(), e) == 0;
}
bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }
std::string dots_to_underscores(std::string s) {
    for (char& c : s)
        if (c == '.') c = '_';
    return s;
}
int64_t numel(const std::vector<int64_t>& s) {
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    return n;
}
// The element count of the update a LoRA / LoHa module's tensors make (no Tucker core here).
int64_t update_numel(const Shapes& t, const std::string& up, const std::string& down) {
    const std::vector<int64_t>& u = t.at(up);
    const std::vector<int64_t>& d = t.at(down);
    return u.at(0) * numel(d) / d.at(0);
}

// SD2.x's UNet and text encoder in one graph, a network on the UNet and (te) the text encoder;
// built, never run.
struct Sd2 {
    sd::UnetConfig ucfg;
    gl::Graph g;
    nn::Weights wu{g, DType::bf16}, wt{g, DType::bf16};
    lora::LoraNetwork net;
    Sd2(lora::LoraConfig c, bool te, const sd::UnetConfig& u = sd::UnetConfig::sd2(),
        const sd::ClipConfig& clip = sd::ClipConfig::vit_h14())
        : ucfg(u), net(std::move(c)) {
        net.attach_unet(wu);
        if (te) net.attach_text_encoder(wt);
        sd::build_clip(wt, g, g.input("ids", DType::i32, {1, 77}), clip);
        sd::unet_forward(wu, ucfg, g.input("x", DType::bf16, {1, 8, 8, 4}), g.input("t", DType::f32, {1}),
                         g.input("c", DType::bf16, {1, 77, ucfg.cross_attention_dim}));
    }
    // The net written by save_kohya (random values, fp16), read back: every key with its shape.
    Shapes write(const gltest::TempDir& tmp, const std::string& name) const {
        std::mt19937 rng(7);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        const std::string path = tmp / (name + ".safetensors");
        lora::save_kohya(path, net, [&](ValueId v) {
            std::vector<float> x(size_t(g.shape(v).numel()));
            for (float& e : x) e = u(rng);
            return x;
        });
        const gl::io::SafetensorsFile f(path);
        Shapes out;
        for (const gl::io::TensorInfo& t : f.list()) out[t.name] = t.shape;
        return out;
    }
    // Each module's layer's weight: its key (no suffix) -> the weight's name in our graph.
    std::map<std::string, std::string> layer_of() const {
        std::map<std::string, std::string> m;
        for (const lora::Module& x : net.modules()) m[x.key()] = x.layer().path + ".weight";
        return m;
    }
};

lora::LoraConfig sd2_config(const std::string& module, int dim, double alpha,
                            std::vector<std::pair<std::string, std::string>> args) {
    lora::NetworkOptions o;
    o.module = module;
    o.dim = dim;
    o.alpha = alpha;
    o.args = std::move(args);
    o.family = &models::sd2_family();
    return lora::network_config(o);
}

// The golden's keys and shapes for a configuration (modules x their base shape's table).
Shapes golden_keys(const nlohmann::json& j, const std::string& config) {
    const nlohmann::json& c = j.at("configs").at(config);
    Shapes out;
    for (const size_t i : c.at("modules").get<std::vector<size_t>>()) {
        const nlohmann::json& m = j.at("modules").at(i);
        const std::string name = m.at(0);
        const nlohmann::json& e = c.at("by_weight_shape").at(shape_key(m.at(1).get<std::vector<int64_t>>()));
        for (const auto& [suffix, shape] : e.items()) out[name + "." + suffix] = shape.get<std::vector<int64_t>>();
    }
    return out;
}

// ---------------------------------------------------------------- ComfyUI

// comfy/model_detection.py detect_unet_config, the fields unet_to_diffusers reads, from the LDM
// key set (no "diffusion_model." prefix).
struct ComfyUnetConfig {
    std::vector<int> num_res_blocks, transformer_depth, transformer_depth_output;
    int transformer_depth_middle = 0;
};

bool any_prefix(const std::set<std::string>& keys, const std::string& p) {
    auto it = keys.lower_bound(p);
    return it != keys.end() && starts_with(*it, p);
}
// count_blocks: how many of fmt(0), fmt(1), ... prefix some key.
int count_blocks(const std::set<std::string>& keys, const std::string& before, const std::string& after) {
    int n = 0;
    while (any_prefix(keys, before + std::to_string(n) + after)) n++;
    return n;
}
// calculate_transformer_depth's depth (0 where it returns None).
int transformer_depth_at(const std::set<std::string>& keys, const std::string& prefix) {
    return count_blocks(keys, prefix + "1.transformer_blocks.", ".");
}

ComfyUnetConfig comfy_detect(const std::set<std::string>& keys) {
    ComfyUnetConfig c;
    const int count = count_blocks(keys, "input_blocks.", ".");
    int last_res_blocks = 0;
    for (int i = 0; i < count; i++) {
        const std::string prefix = gl::cat("input_blocks.", i, "."), out = gl::cat("output_blocks.", count - i - 1, ".");
        if (keys.count(prefix + "0.op.weight")) {
            c.num_res_blocks.push_back(last_res_blocks);
            last_res_blocks = 0;
            c.transformer_depth_output.push_back(transformer_depth_at(keys, out));
            continue;
        }
        if (keys.count(prefix + "0.in_layers.0.weight")) {
            last_res_blocks++;
            c.transformer_depth.push_back(transformer_depth_at(keys, prefix));
        }
        if (keys.count(out + "0.in_layers.0.weight")) c.transformer_depth_output.push_back(transformer_depth_at(keys, out));
    }
    c.num_res_blocks.push_back(last_res_blocks);
    c.transformer_depth_middle =
        keys.count("middle_block.1.proj_in.weight") ? count_blocks(keys, "middle_block.1.transformer_blocks.", ".") : -1;
    return c;
}

// comfy/utils.py unet_to_diffusers: diffusers key -> LDM key (the ".weight" entries suffice here).
std::map<std::string, std::string> comfy_unet_to_diffusers(const ComfyUnetConfig& cfg) {
    static const std::vector<std::pair<std::string, std::string>> kResnet = {
        {"in_layers.2.weight", "conv1.weight"},          {"emb_layers.1.weight", "time_emb_proj.weight"},
        {"out_layers.3.weight", "conv2.weight"},         {"skip_connection.weight", "conv_shortcut.weight"},
        {"in_layers.0.weight", "norm1.weight"},          {"out_layers.0.weight", "norm2.weight"}};
    static const std::vector<std::string> kAttentions = {"proj_in.weight", "proj_out.weight", "norm.weight"};
    static const std::vector<std::string> kTransformer = {
        "norm1.weight",         "norm2.weight",         "norm3.weight",          "attn1.to_q.weight",
        "attn1.to_k.weight",    "attn1.to_v.weight",    "attn1.to_out.0.weight", "attn2.to_q.weight",
        "attn2.to_k.weight",    "attn2.to_v.weight",    "attn2.to_out.0.weight", "ff.net.0.proj.weight",
        "ff.net.2.weight"};
    static const std::vector<std::pair<std::string, std::string>> kBasic = {
        {"input_blocks.0.0.weight", "conv_in.weight"},     {"out.0.weight", "conv_norm_out.weight"},
        {"out.2.weight", "conv_out.weight"},               {"time_embed.0.weight", "time_embedding.linear_1.weight"},
        {"time_embed.2.weight", "time_embedding.linear_2.weight"}};
    std::map<std::string, std::string> m;
    std::vector<int> depth = cfg.transformer_depth, depth_out = cfg.transformer_depth_output;
    const int blocks = int(cfg.num_res_blocks.size());
    auto attention = [&](const std::string& hf, const std::string& ldm, int n) {
        for (const std::string& b : kAttentions) m[hf + b] = ldm + b;
        for (int t = 0; t < n; t++)
            for (const std::string& b : kTransformer)
                m[gl::cat(hf, "transformer_blocks.", t, ".", b)] = gl::cat(ldm, "transformer_blocks.", t, ".", b);
    };
    for (int x = 0; x < blocks; x++) {
        int n = 1 + (cfg.num_res_blocks[size_t(x)] + 1) * x;
        for (int i = 0; i < cfg.num_res_blocks[size_t(x)]; i++) {
            for (const auto& [ldm, hf] : kResnet) m[gl::cat("down_blocks.", x, ".resnets.", i, ".", hf)] = gl::cat("input_blocks.", n, ".0.", ldm);
            const int t = depth.front();
            depth.erase(depth.begin());
            if (t > 0) attention(gl::cat("down_blocks.", x, ".attentions.", i, "."), gl::cat("input_blocks.", n, ".1."), t);
            n++;
        }
        m[gl::cat("down_blocks.", x, ".downsamplers.0.conv.weight")] = gl::cat("input_blocks.", n, ".0.op.weight");
    }
    attention("mid_block.attentions.0.", "middle_block.1.", cfg.transformer_depth_middle);
    for (int i = 0; i < 2; i++)
        for (const auto& [ldm, hf] : kResnet) m[gl::cat("mid_block.resnets.", i, ".", hf)] = gl::cat("middle_block.", 2 * i, ".", ldm);
    const std::vector<int> res(cfg.num_res_blocks.rbegin(), cfg.num_res_blocks.rend());
    for (int x = 0; x < blocks; x++) {
        int n = (res[size_t(x)] + 1) * x;
        const int l = res[size_t(x)] + 1;
        for (int i = 0; i < l; i++) {
            int c = 0;
            for (const auto& [ldm, hf] : kResnet) m[gl::cat("up_blocks.", x, ".resnets.", i, ".", hf)] = gl::cat("output_blocks.", n, ".0.", ldm);
            c++;
            const int t = depth_out.back();
            depth_out.pop_back();
            if (t > 0) {
                c++;
                attention(gl::cat("up_blocks.", x, ".attentions.", i, "."), gl::cat("output_blocks.", n, ".1."), t);
            }
            if (i == l - 1) m[gl::cat("up_blocks.", x, ".upsamplers.0.conv.weight")] = gl::cat("output_blocks.", n, ".", c, ".conv.weight");
            n++;
        }
    }
    for (const auto& [ldm, hf] : kBasic) m[hf] = ldm;
    return m;
}

// ComfyUI's SD2.x model: its state_dict keys with element counts, and the lora key map of
// model_lora_keys_unet + model_lora_keys_clip (lora name -> model key).
struct Comfy {
    std::map<std::string, int64_t> model;
    std::map<std::string, std::string> key_map;
};

Comfy comfy_sd2(const Sd2& s) {
    Comfy c;
    std::set<std::string> ldm;
    for (const nn::WeightEntry& e : s.wu.entries()) {
        const std::string k = sd::unet_key_original(s.ucfg, e.name);
        REQUIRE(starts_with(k, "model.diffusion_model."));
        ldm.insert(k.substr(22));
        c.model["diffusion_model." + k.substr(22)] = s.g.shape(e.id).numel();
    }
    // SD20's clip_h: transformers' CLIPTextModel of sd2_clip_config.json (23 layers), under
    // clip_h.transformer. (supported_models.py SD20.process_clip_state_dict).
    for (const nn::WeightEntry& e : s.wt.entries()) c.model["clip_h.transformer." + e.name] = s.g.shape(e.id).numel();
    for (const auto& [k, n] : c.model)
        if (starts_with(k, "diffusion_model.") && ends_with(k, ".weight"))
            c.key_map["lora_unet_" + dots_to_underscores(k.substr(16, k.size() - 16 - 7))] = k;
    for (const auto& [hf, l] : comfy_unet_to_diffusers(comfy_detect(ldm)))
        c.key_map["lora_unet_" + dots_to_underscores(hf.substr(0, hf.size() - 7))] = "diffusion_model." + l;
    static const std::vector<std::pair<std::string, std::string>> kClip = {
        {"mlp.fc1", "mlp_fc1"},
        {"mlp.fc2", "mlp_fc2"},
        {"self_attn.k_proj", "self_attn_k_proj"},
        {"self_attn.q_proj", "self_attn_q_proj"},
        {"self_attn.v_proj", "self_attn_v_proj"},
        {"self_attn.out_proj", "self_attn_out_proj"}};
    for (int b = 0; b < 32; b++)
        for (const auto& [path, name] : kClip) {
            const std::string k = gl::cat("clip_h.transformer.text_model.encoder.layers.", b, ".", path, ".weight");
            if (c.model.count(k)) c.key_map[gl::cat("lora_te_text_model_encoder_layers_", b, "_", name)] = k;
        }
    return c;
}

// load_lora over the key map, then ModelPatcher.add_patches (a patch whose key the model lacks is
// "NOT LOADED"): the keys taken, and each patched model key with the update's element count.
struct ComfyLoad {
    std::set<std::string> taken;
    std::map<std::string, std::pair<std::string, int64_t>> patches;  // lora name -> (model key, numel)
    std::vector<std::string> not_loaded;
};

ComfyLoad comfy_load(const Comfy& c, const Shapes& file) {
    ComfyLoad r;
    auto take = [&](const std::string& k) {
        if (!file.count(k)) return false;
        r.taken.insert(k);
        return true;
    };
    for (const auto& [x, to] : c.key_map) {
        take(x + ".alpha");
        take(x + ".dora_scale");
        std::optional<int64_t> n;
        if (take(x + ".lora_up.weight")) {
            take(x + ".lora_down.weight");
            CHECK_MESSAGE(!take(x + ".lora_mid.weight"), x);  // no Tucker core in these networks
            n = update_numel(file, x + ".lora_up.weight", x + ".lora_down.weight");
        }
        if (take(x + ".hada_w1_a")) {
            for (const char* s : {".hada_w1_b", ".hada_w2_a", ".hada_w2_b"}) take(x + s);
            CHECK_MESSAGE(!take(x + ".hada_t1"), x);
            n = update_numel(file, x + ".hada_w1_a", x + ".hada_w1_b");
        }
        if (!n) continue;
        if (c.model.count(to))
            r.patches[x] = {to, *n};
        else
            r.not_loaded.push_back(x);
    }
    return r;
}

// ---------------------------------------------------------------- stable-diffusion.cpp

// The model's tensors: name -> PyTorch shape. SD2.x's UNet under LDM names; the text encoder as a
// single file holds it (OpenCLIP's 24 resblocks, converted: fused in_proj) or a diffusers folder
// (text_encoder/ under te.: transformers' names, q/k/v split).
sdcpp::Shapes sdcpp_model(const Sd2& s, bool single_file) {
    sdcpp::Shapes m;
    for (const nn::WeightEntry& e : s.wu.entries()) m[sd::unet_key_original(s.ucfg, e.name)] = torch_shape(s.g.shape(e.id));
    const int64_t w = 1024, ff = 4096;
    if (single_file) {
        for (int i = 0; i < 24; i++)
            for (const auto& [suffix, shape] : std::vector<std::pair<std::string, std::vector<int64_t>>>{
                     {"attn.in_proj_weight", {3 * w, w}}, {"attn.out_proj.weight", {w, w}},
                     {"mlp.c_fc.weight", {ff, w}}, {"mlp.c_proj.weight", {w, ff}}})
                m["cond_stage_model." + sdcpp::open_clip_name(gl::cat("model.transformer.resblocks.", i, ".", suffix))] = shape;
    } else {
        for (const nn::WeightEntry& e : s.wt.entries()) m["cond_stage_model.transformer." + e.name] = torch_shape(s.g.shape(e.id));
    }
    return m;
}

// What lora.hpp applies (tests/sdcpp_names.h): the file keys. (preprocess_lora_tensors renames
// q/k/v onto a fused in_proj only when the model has
// cond_stage_model.1.transformer.text_model.encoder.layers.0.self_attn.in_proj.weight: SDXL's second
// encoder, never SD2.x.) No update here has another size than its model tensor, none asserts.
std::set<std::string> sdcpp_applied(const Shapes& file, const sdcpp::Shapes& model) {
    REQUIRE(!model.count("cond_stage_model.1.transformer.text_model.encoder.layers.0.self_attn.in_proj.weight"));
    const sdcpp::Result r = sdcpp::apply(file, model);
    CHECK(r.skipped.empty());
    CHECK(r.aborts.empty());
    std::set<std::string> applied;
    for (const auto& [k, tensor] : r.applied) applied.insert(k);
    return applied;
}

struct Case {
    std::string name, module;
    std::vector<std::pair<std::string, std::string>> args;
    bool te;
};
const std::vector<Case> kCases = {{"lora", "networks.lora", {}, true},
                                  {"lora_unet_only", "networks.lora", {}, false},
                                  {"locon", "networks.lora", {{"conv_dim", "4"}, {"conv_alpha", "1"}}, true},
                                  {"loha", "lycoris.kohya", {{"algo", "loha"}}, true}};

bool sdcpp_unconverted(const std::string& key) {
    for (const char* m : {"lora_unet_conv_in.", "lora_unet_conv_out.", "lora_unet_time_embedding_linear_1.",
                          "lora_unet_time_embedding_linear_2."})
        if (starts_with(key, m)) return true;
    return false;
}
bool te_qkv(const std::string& key) {
    return starts_with(key, "lora_te_") && (key.find("_self_attn_q_proj.") != std::string::npos ||
                                            key.find("_self_attn_k_proj.") != std::string::npos ||
                                            key.find("_self_attn_v_proj.") != std::string::npos);
}

}  // namespace

TEST_CASE("sd2 loaders: SD2.x files have the keys and shapes kohya's networks.lora and LyCORIS's lycoris.kohya write") {
    const nlohmann::json j = nlohmann::json::parse(gltest::slurp(gltest::golden_dir("sd2") + "lora_keys.json"));
    gltest::TempDir tmp;
    for (const Case& c : kCases) {
        CAPTURE(c.name);
        const nlohmann::json& g = j.at("configs").at(c.name);
        REQUIRE(g.at("network_module") == c.module);
        REQUIRE(g.at("train_text_encoder") == c.te);
        Sd2 s(sd2_config(c.module, g.at("network_dim"), g.at("network_alpha"), c.args), c.te);
        const Shapes file = s.write(tmp, c.name), want = golden_keys(j, c.name);
        CHECK(file.size() == g.at("keys").get<size_t>());
        size_t bad = 0;
        for (const auto& [k, shape] : want) {
            auto it = file.find(k);
            if (it == file.end() || it->second != shape)
                if (bad++ < 5) FAIL_CHECK(k, ": kohya ", nlohmann::json(shape).dump(), ", ours ",
                                          it == file.end() ? std::string("missing") : nlohmann::json(it->second).dump());
        }
        for (const auto& [k, shape] : file)
            if (!want.count(k) && bad++ < 5) FAIL_CHECK(k, ": ours only");
        CHECK(bad == 0);
        MESSAGE(c.name, ": ", file.size(), " tensors, kohya's keys and shapes");
    }
}

TEST_CASE("sd2 loaders: ComfyUI takes every tensor of an SD2.x file and patches the layer each module was trained on") {
    gltest::TempDir tmp;
    for (const Case& c : kCases) {
        CAPTURE(c.name);
        Sd2 s(sd2_config(c.module, 4, 1.0, c.args), c.te);
        const Shapes file = s.write(tmp, c.name);
        const Comfy comfy = comfy_sd2(s);
        const ComfyLoad r = comfy_load(comfy, file);
        std::vector<std::string> not_taken;
        for (const auto& [k, shape] : file)
            if (!r.taken.count(k)) not_taken.push_back(k);
        CHECK_MESSAGE(not_taken.empty(), not_taken.size(), " not loaded, first ", not_taken.empty() ? "" : not_taken[0]);
        CHECK_MESSAGE(r.not_loaded.empty(), r.not_loaded.size(), " NOT LOADED");
        // Each module's patch: its own layer's weight (LDM name or clip_h's), of the update's size.
        size_t bad = 0;
        for (const auto& [key, path] : s.layer_of()) {
            const std::string want = starts_with(key, "lora_te_")
                                         ? "clip_h.transformer." + path
                                         : "diffusion_model." + sd::unet_key_original(s.ucfg, path).substr(22);
            auto it = r.patches.find(key);
            if (it == r.patches.end() || it->second.first != want || it->second.second != comfy.model.at(want))
                if (bad++ < 5) FAIL_CHECK(key, " -> ", it == r.patches.end() ? std::string("(none)") : it->second.first,
                                          ", want ", want);
        }
        CHECK(bad == 0);
        CHECK(r.patches.size() == s.net.modules().size());
        MESSAGE(c.name, ": ", file.size(), " tensors, ", r.patches.size(), " patches, ComfyUI loads all");
    }
}

TEST_CASE("sd2 loaders: stable-diffusion.cpp applies kohya's UNet tensors, its SD2.x single file leaves the text encoder's q/k/v") {
    gltest::TempDir tmp;
    for (const Case& c : kCases) {
        CAPTURE(c.name);
        Sd2 s(sd2_config(c.module, 4, 1.0, c.args), c.te);
        const Shapes file = s.write(tmp, c.name);
        for (const bool single : {true, false}) {
            CAPTURE(single);
            const std::set<std::string> applied = sdcpp_applied(file, sdcpp_model(s, single));
            std::set<std::string> unused, expected;
            for (const auto& [k, shape] : file) {
                if (!applied.count(k)) unused.insert(k);
                if (sdcpp_unconverted(k) || (single && te_qkv(k))) expected.insert(k);
            }
            CHECK(unused == expected);
            if (unused != expected)
                for (const std::string& k : unused)
                    if (!expected.count(k)) {
                        FAIL_CHECK("unexpectedly unused: ", k, " as ", sdcpp::lora_name(k));
                        break;
                    }
            size_t te = 0, lyco = 0;
            for (const std::string& k : expected) (te_qkv(k) ? te : lyco)++;
            if (c.te) CHECK((te > 0) == single);
            CHECK((lyco > 0) == (c.name == "loha"));
            MESSAGE(c.name, std::string(single ? " (single file)" : " (diffusers folder)"), ": ", file.size(), " tensors, ",
                    applied.size(), " applied; unused: ", te, " text-encoder q/k/v, ", lyco,
                    " conv_in / conv_out / time_embedding");
        }
    }
}

TEST_CASE("sd2 loaders: the modelled stable-diffusion.cpp names of kohya's keys") {
    // Spot checks of the conversion against names worked by hand from name_conversion.cpp.
    CHECK(sdcpp::lora_name("lora_unet_down_blocks_1_attentions_0_proj_in.lora_up.weight") ==
          "lora.model.diffusion_model.input_blocks.4.1.proj_in.weight.lora_up");
    CHECK(sdcpp::lora_name("lora_unet_up_blocks_3_attentions_2_transformer_blocks_0_attn1_to_out_0.alpha") ==
          "lora.model.diffusion_model.output_blocks.11.1.transformer_blocks.0.attn1.to_out.0.weight.alpha");
    CHECK(sdcpp::lora_name("lora_unet_mid_block_resnets_1_time_emb_proj.lora_down.weight") ==
          "lora.model.diffusion_model.middle_block.2.emb_layers.1.weight.lora_down");
    CHECK(sdcpp::lora_name("lora_unet_up_blocks_1_upsamplers_0_conv.hada_w1_a") ==
          "lora.model.diffusion_model.output_blocks.5.2.conv.weight.hada_w1_a");
    CHECK(sdcpp::lora_name("lora_unet_down_blocks_2_downsamplers_0_conv.lora_up.weight") ==
          "lora.model.diffusion_model.input_blocks.9.0.op.weight.lora_up");
    CHECK(sdcpp::lora_name("lora_te_text_model_encoder_layers_22_mlp_fc1.lora_up.weight") ==
          "lora.cond_stage_model.transformer.text_model.encoder.layers.22.mlp.fc1.weight.lora_up");
    CHECK(sdcpp::lora_name("lora_te_text_model_encoder_layers_3_self_attn_q_proj.lora_up.weight") ==
          "lora.cond_stage_model.transformer.text_model.encoder.layers.3.self_attn.q_proj.weight.lora_up");
    // The whole-name table misses a suffixed name: conv_in stays diffusers-named.
    CHECK(sdcpp::lora_name("lora_unet_conv_in.hada_w1_a") == "lora.model.diffusion_model.conv_in.weight.hada_w1_a");
    CHECK(sdcpp::lora_name("lora_unet_time_embedding_linear_1.alpha") ==
          "lora.model.diffusion_model.time_embedding.linear.1.weight.alpha");
    CHECK(sdcpp::open_clip_name("model.transformer.resblocks.7.attn.in_proj_weight") ==
          "transformer.text_model.encoder.layers.7.self_attn.in_proj.weight");
    // ComfyUI's detection of SD2.x's UNet (model_detection.py): SD20's unet_to_diffusers inputs.
    Sd2 s(sd2_config("networks.lora", 4, 1.0, {}), false);
    std::set<std::string> ldm;
    for (const nn::WeightEntry& e : s.wu.entries()) ldm.insert(sd::unet_key_original(s.ucfg, e.name).substr(22));
    const ComfyUnetConfig d = comfy_detect(ldm);
    CHECK(d.num_res_blocks == std::vector<int>{2, 2, 2, 2});
    CHECK(d.transformer_depth == std::vector<int>{1, 1, 1, 1, 1, 1, 0, 0});
    CHECK(d.transformer_depth_output == std::vector<int>{1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0});
    CHECK(d.transformer_depth_middle == 1);
    const auto m = comfy_unet_to_diffusers(d);
    CHECK(m.at("up_blocks.1.upsamplers.0.conv.weight") == "output_blocks.5.2.conv.weight");
    CHECK(m.at("up_blocks.3.attentions.2.proj_out.weight") == "output_blocks.11.1.proj_out.weight");
    CHECK(m.count("up_blocks.0.attentions.0.proj_in.weight") == 0);
}

TEST_CASE("sd2 loaders: on the golden tiny SD2.x checkpoint ComfyUI's UNet patches and stable-diffusion.cpp's text encoder tensors land on its tensors") {
    // The tiny SD2.x UNet in the LDM layout diffusers' converter wrote (make_sd2_unet_golden.py) and
    // the OpenCLIP tower of a single file (make_sd2_clip_golden.py, 4 resblocks; our encoder holds 3):
    // the model's own tensor names and shapes, none of them ours.
    const std::string dir = gltest::golden_dir("sd2");
    const gl::io::SafetensorsFile unet(dir + "unet_original.safetensors"), clip(dir + "clip_openclip.safetensors");
    const sd::ClipConfig tower{1000, 32, 3, 4, 64, 77, gl::Act::gelu_erf, 1e-5f};
    gltest::TempDir tmp;
    for (const Case& c : kCases) {
        CAPTURE(c.name);
        Sd2 s(sd2_config(c.module, 2, 1.0, c.args), c.te, sd::UnetConfig::tiny_sd2(), tower);
        const Shapes file = s.write(tmp, c.name);
        // ComfyUI: its key map from the golden file's UNet keys alone (detect_unet_config on them).
        Comfy comfy;
        std::set<std::string> ldm;
        for (const gl::io::TensorInfo& t : unet.list()) {
            REQUIRE(starts_with(t.name, "model.diffusion_model."));
            ldm.insert(t.name.substr(22));
            comfy.model["diffusion_model." + t.name.substr(22)] = t.numel();
        }
        for (const auto& [hf, l] : comfy_unet_to_diffusers(comfy_detect(ldm)))
            comfy.key_map["lora_unet_" + dots_to_underscores(hf.substr(0, hf.size() - 7))] = "diffusion_model." + l;
        Shapes unet_part;
        for (const auto& [k, shape] : file)
            if (starts_with(k, "lora_unet_")) unet_part[k] = shape;
        const ComfyLoad r = comfy_load(comfy, unet_part);
        CHECK(r.taken.size() == unet_part.size());
        CHECK(r.not_loaded.empty());
        size_t modules = 0;
        for (const auto& [key, path] : s.layer_of()) {
            if (!starts_with(key, "lora_unet_")) continue;
            modules++;
            auto it = r.patches.find(key);
            REQUIRE_MESSAGE(it != r.patches.end(), key);
            // The golden file's tensor of that layer (diffusers' own LDM name), of the update's size.
            CHECK_MESSAGE(it->second.first == "diffusion_model." + sd::unet_key_original(s.ucfg, path).substr(22), key);
            CHECK_MESSAGE(it->second.second == comfy.model.at(it->second.first), key);
        }
        CHECK(r.patches.size() == modules);
        // stable-diffusion.cpp: the tower's tensors under its converted names (fused in_proj); its
        // UNet conversion is SD1.x / SD2.x's fixed 4-level layout, which the tiny UNet is not.
        sdcpp::Shapes model;
        for (const gl::io::TensorInfo& t : clip.list())
            if (starts_with(t.name, "cond_stage_model."))
                model["cond_stage_model." + sdcpp::open_clip_name(t.name.substr(17))] = t.shape;
        REQUIRE(model.count("cond_stage_model.transformer.text_model.encoder.layers.0.self_attn.in_proj.weight"));
        Shapes te_part;
        for (const auto& [k, shape] : file)
            if (starts_with(k, "lora_te_")) te_part[k] = shape;
        const std::set<std::string> applied = sdcpp_applied(te_part, model);
        size_t qkv = 0;
        for (const auto& [k, shape] : te_part) {
            CHECK_MESSAGE(applied.count(k) == (te_qkv(k) ? 0u : 1u), k);
            qkv += te_qkv(k);
        }
        CHECK(qkv == (c.te ? 3u * 3u * 3u + (c.name == "loha" ? 3u * 3u * 2u : 0u) : 0u));
        MESSAGE(c.name, ": ", unet_part.size(), " UNet tensors patched by ComfyUI on the golden checkpoint; ",
                te_part.size(), " text-encoder tensors, ", applied.size(), " applied by stable-diffusion.cpp");
    }
}
