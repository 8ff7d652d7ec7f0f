// The files of lycoris.kohya networks (lora/kohya.h, lora/network_args.h) against what LyCORIS
// builds and writes (tests/golden/data/lycoris/kohya_sd15.json, kohya_tiny*): SD1.5's modules, keys
// and shapes for each config and preset, the saved file's dtype, metadata and LyCORIS's
// sshs_model_hash; the files LyCORIS wrote load into our network and give its forward's weights;
// and every tensor of a file maps in ComfyUI's loader and in stable-diffusion.cpp's, modelled here
// on their sources (ComfyUI comfy/lora.py load_lora and model_lora_keys_unet / _clip;
// stable-diffusion.cpp src/model/adapter/lora.hpp).
#include <optional>
#include <set>

#include "ggml-lite/io/sha256.h"
#include "lycoris_fixtures.h"

using namespace lyco_test;
using gltest::read_f32;
using gltest::rel_error;

namespace {

// A config's table by base weight shape (another config's with the diff applied).
std::map<std::string, nlohmann::json> table_of(const nlohmann::json& configs, const std::string& name) {
    const nlohmann::json& c = configs.at(name);
    std::map<std::string, nlohmann::json> t;
    if (c.contains("by_weight_shape")) {
        for (const auto& [k, v] : c.at("by_weight_shape").items()) t[k] = v;
        return t;
    }
    t = table_of(configs, c.at("by_weight_shape_vs"));
    for (const auto& [shape, d] : c.at("by_weight_shape_diff").items()) {
        nlohmann::json& e = t[shape];
        const nlohmann::json changed = d.value("tensors_added_or_changed", nlohmann::json::object()),
                             removed = d.value("tensors_removed", nlohmann::json::array());
        for (const auto& [s, sh] : changed.items()) e["tensors"][s] = sh;
        for (const std::string s : removed) e["tensors"].erase(s);
        if (d.contains("alpha")) e["alpha"] = d.at("alpha");
    }
    return t;
}

// A config's network args in the order kohya passed them (its ss_network_args, less "dropout").
std::vector<std::pair<std::string, std::string>> args_of(const nlohmann::json& c) {
    const auto a = nlohmann::ordered_json::parse(c.at("kohya_metadata").at("ss_network_args").get<std::string>());
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& [k, v] : a.items())
        if (k != "dropout") out.emplace_back(k, v.get<std::string>());
    return out;
}

lora::LoraConfig config_of(const nlohmann::json& c) { return lycoris_config(c.at("network_dim"), c.at("network_alpha"), args_of(c)); }

// Every key a network puts in its file.
std::vector<std::string> file_keys(const lora::LoraNetwork& net) {
    std::vector<std::string> k;
    for (const lora::Module& m : net.modules())
        for (const std::string& s : m.file_order()) k.push_back(m.key() + "." + s);
    return k;
}

// ComfyUI's lora names for SD1.5 (model_lora_keys_unet: "lora_unet_" + every diffusers UNet weight
// path through unet_to_diffusers; model_lora_keys_clip: the text encoder's LORA_CLIP_MAP).
std::set<std::string> comfy_lora_names(const nn::Weights& unet) {
    std::set<std::string> n;
    for (const nn::WeightEntry& e : unet.entries())
        if (e.name.size() > 7 && e.name.compare(e.name.size() - 7, 7, ".weight") == 0)
            n.insert(lora::kohya_key(models::sd15_family(), lora::Part::unet, e.name.substr(0, e.name.size() - 7)));
    for (int b = 0; b < 12; b++)
        for (const char* c : {"mlp_fc1", "mlp_fc2", "self_attn_k_proj", "self_attn_q_proj", "self_attn_v_proj",
                              "self_attn_out_proj"})
            n.insert(gl::cat("lora_te_text_model_encoder_layers_", b, "_", c));
    return n;
}

// The keys ComfyUI's load_lora takes for its lora names (the rest it logs "lora key not loaded").
std::set<std::string> comfy_loaded(const std::set<std::string>& file, const std::set<std::string>& names) {
    std::set<std::string> used;
    auto take = [&](const std::string& k) {
        if (file.count(k)) used.insert(k);
        return file.count(k) != 0;
    };
    for (const std::string& x : names) {
        take(x + ".alpha");
        take(x + ".dora_scale");
        if (take(x + ".lora_up.weight")) {
            take(x + ".lora_down.weight");
            take(x + ".lora_mid.weight");
        }
        if (take(x + ".hada_w1_a")) {
            for (const char* s : {".hada_w1_b", ".hada_w2_a", ".hada_w2_b"}) take(x + s);
            if (take(x + ".hada_t1")) take(x + ".hada_t2");
        }
        for (const char* s : {".lokr_w1", ".lokr_w2", ".lokr_w1_a", ".lokr_w1_b", ".lokr_w2_a", ".lokr_w2_b", ".lokr_t2"})
            take(x + s);
    }
    return used;
}

// stable-diffusion.cpp's: the suffixes its name conversion turns into lora tensors it applies.
std::set<std::string> sdcpp_loaded(const std::set<std::string>& file, const std::set<std::string>& names) {
    std::set<std::string> used;
    for (const std::string& k : file) {
        const size_t dot = k.find('.');
        const std::string x = k.substr(0, dot), s = k.substr(dot + 1);
        const bool known = s == "alpha" || s == "lora_up.weight" || s == "lora_down.weight" || s == "lora_mid.weight" ||
                           s.rfind("hada_", 0) == 0 ||
                           (s.rfind("lokr_w", 0) == 0);  // lokr_w1, lokr_w1_a/b, lokr_w2, lokr_w2_a/b; not lokr_t2
        if (names.count(x) && known) used.insert(k);
    }
    return used;
}

const std::vector<std::string> kTinyPaths = {
    "text_model.encoder.layers.0.self_attn.k_proj", "text_model.encoder.layers.0.self_attn.v_proj",
    "text_model.encoder.layers.0.self_attn.q_proj", "text_model.encoder.layers.0.self_attn.out_proj",
    "text_model.encoder.layers.0.mlp.fc1", "text_model.encoder.layers.0.mlp.fc2", "conv_in",
    "time_embedding.linear_1", "time_embedding.linear_2", "down_blocks.0.resnets.0.conv1",
    "down_blocks.0.resnets.0.time_emb_proj", "down_blocks.0.resnets.0.conv2", "down_blocks.0.attentions.0.proj_in",
    "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q", "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_k",
    "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_v",
    "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_out.0",
    "down_blocks.0.attentions.0.transformer_blocks.0.ff.net.0.proj",
    "down_blocks.0.attentions.0.transformer_blocks.0.ff.net.2",
    "down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_q", "down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_k",
    "down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_v",
    "down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_out.0", "down_blocks.0.attentions.0.proj_out",
    "down_blocks.0.downsamplers.0.conv", "up_blocks.0.resnets.0.conv1", "up_blocks.0.resnets.0.time_emb_proj",
    "up_blocks.0.resnets.0.conv2", "up_blocks.0.resnets.0.conv_shortcut", "up_blocks.0.upsamplers.0.conv", "conv_out"};

// The tiny tree of lycoris_kohya_files.py as layers (base weight shapes from the expected file),
// with a network built from `file` on it.
struct TinyTree {
    gl::Graph g;
    nn::Weights wu{g, DType::f32}, wt{g, DType::f32};
    lora::LoraNetwork net;
    std::unique_ptr<gl::Runtime> rt;
    TinyTree(const gl::io::TensorSource& file, const gl::io::TensorSource& expected) : net(from(file)) {
        net.attach_unet(wu);
        net.attach_text_encoder(wt);
        for (const std::string& path : kTinyPaths) {
            const bool te = path.rfind("text_model.", 0) == 0;
            const std::string key = lora::kohya_key(models::sd15_family(), te ? lora::Part::text_encoder : lora::Part::unet, path);
            const std::vector<int64_t> s = expected.info("base." + key).shape;
            nn::Weights& w = te ? wt : wu;
            const size_t dot = path.rfind('.');
            std::optional<nn::WeightScope> scope;
            if (dot != std::string::npos) scope.emplace(w, path.substr(0, dot));
            const std::string leaf = dot == std::string::npos ? path : path.substr(dot + 1);
            ValueId y;
            if (s.size() == 2) {
                y = nn::linear(w, leaf, g.input(key + ".x", DType::f32, {1, s[1]}), s[0], true);
            } else {
                const int k = int(s[2]), stride = path.find("downsamplers") != std::string::npos ? 2 : 1;
                y = nn::conv2d(w, leaf, g.input(key + ".x", DType::f32, {1, 4, 4, s[1]}), s[0], k, stride, k / 2);
            }
            g.mark_output(y);
        }
        rt = gl::make_cpu_runtime(gl::make_plan(g));
        for (nn::Weights* w : {&wu, &wt})
            for (const nn::WeightEntry& e : w->entries()) {
                const std::string path = e.name.substr(0, e.name.rfind('.'));
                const std::string key =
                    lora::kohya_key(models::sd15_family(), w == &wt ? lora::Part::text_encoder : lora::Part::unet, path);
                if (e.name.size() > 5 && e.name.compare(e.name.size() - 5, 5, ".bias") == 0) {
                    rt->write_f32(e.id, std::vector<float>(size_t(g.shape(e.id).numel()), 0.0f));
                    continue;
                }
                const std::vector<int64_t> s = expected.info("base." + key).shape;
                const std::vector<float> v = read_f32(expected, "base." + key);
                rt->write_f32(e.id, s.size() == 4 ? nchw_to_nhwc(v, s[0], s[1], s[2] * s[3]) : v);
            }
    }
    static lora::LoraConfig from(const gl::io::TensorSource& file) {
        lora::LoraConfig c;
        c.network_module = "lycoris.kohya";  // LyCORIS's files: its order of keys
        c.from_file = std::make_shared<lora::FileModules>(
            std::shared_ptr<const gl::io::TensorSource>(&file, [](const gl::io::TensorSource*) {}), lora::LdmNames{});
        return c;
    }
    // A module's weight after the merge, PyTorch's layout.
    std::vector<float> weight(const lora::Module& m) const {
        const nn::Weights& w = m.layer().part == lora::Part::unet ? wu : wt;
        for (const nn::WeightEntry& e : w.entries())
            if (e.name == m.layer().path + ".weight") {
                const gl::Shape s = g.shape(e.id);
                const std::vector<float> v = rt->read_f32(e.id);
                return s.nd == 4 ? nhwc_to_nchw(v, s[0], s[3], s[1] * s[2]) : v;
            }
        gl::fail("no weight for ", m.key());
    }
};

}  // namespace

TEST_CASE("lycoris files: SD1.5 networks of lycoris.kohya have LyCORIS's modules, keys, shapes and alphas") {
    const nlohmann::json j = read_json("kohya_sd15.json");
    const nlohmann::json& modules = j.at("modules");
    for (const auto& [name, c] : j.at("configs").items()) {
        CAPTURE(name);
        Sd15 s(config_of(c));
        const std::map<std::string, nlohmann::json> table = table_of(j.at("configs"), name);
        std::set<std::string> want, got;
        for (int i : c.at("modules")) want.insert(modules.at(size_t(i)).at(0).get<std::string>());
        size_t keys = 0, bad = 0;
        for (const lora::Module& m : s.net.modules()) {
            got.insert(m.key());
            keys += m.file_order().size();
            const nlohmann::json& e = table.at(shape_key(m.layer().torch_shape()));
            std::map<std::string, std::vector<int64_t>> t;
            for (const auto& [suffix, shape] : e.at("tensors").items()) t[suffix] = shape.get<std::vector<int64_t>>();
            if (file_tensors(m) != t || m.file_alpha() != e.at("alpha").get<float>()) {
                if (bad++ < 3) FAIL_CHECK(m.key(), ": ", nlohmann::json(file_tensors(m)).dump(), " alpha ", m.file_alpha(),
                                          ", LyCORIS ", e.dump());
            }
        }
        CHECK(bad == 0);
        CHECK(got == want);
        CHECK(keys == c.at("keys").get<size_t>());
        const auto md = lora::kohya_metadata(s.net, {});
        for (const auto& [k, v] : c.at("kohya_metadata").items()) CHECK_MESSAGE(md.at(k) == v.get<std::string>(), k);
    }
    for (const auto& [preset, p] : j.at("presets").items()) {
        CAPTURE(preset);
        Sd15 s(lycoris_config(8, 4.0, {{"preset", preset}}));
        std::set<std::string> want, got;
        for (int i : p.at("modules")) want.insert(modules.at(size_t(i)).at(0).get<std::string>());
        for (const lora::Module& m : s.net.modules()) got.insert(m.key());
        CHECK(got == want);
        CHECK(got.size() == p.at("count").get<size_t>());
    }
}

TEST_CASE("lycoris files: a saved SD1.5 file has LyCORIS's dtype, metadata and sshs_model_hash over its state_dict") {
    const nlohmann::json j = read_json("kohya_sd15.json");
    const nlohmann::json& c = j.at("configs").at("loha_dora_fp16");
    Sd15 s(config_of(c));
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::map<ValueId, std::vector<float>> store;
    for (ValueId p : s.net.parameters()) {
        store[p].resize(size_t(s.g.shape(p).numel()));
        for (float& e : store[p]) e = u(rng);
    }
    gltest::TempDir tmp;
    lora::SaveOptions opt;
    opt.precision = lora::SavePrecision::fp16;
    const std::string path = tmp / "loha.safetensors";
    CHECK(lora::save_kohya(path, s.net, [&](ValueId v) { return store.at(v); }, opt) == c.at("keys").get<size_t>());
    gl::io::SafetensorsFile f(path);
    for (const gl::io::TensorInfo& t : f.list()) CHECK(t.dtype == DType::f16);
    const auto& md = f.metadata();
    CHECK(md.count("sshs_legacy_hash") == 0);  // LyCORIS writes sshs_model_hash alone
    for (const auto& [k, v] : c.at("kohya_metadata").items()) CHECK(md.at(k) == v.get<std::string>());
    // LyCORIS's hash: each tensor's bytes in its state_dict order (text encoder first, modules as
    // PyTorch defines them: kohya_sd15.json's list), each module's keys in the order it saves them.
    gl::io::Sha256 h;
    for (int i : c.at("modules")) {
        const std::string key = j.at("modules").at(size_t(i)).at(0);
        const lora::Module* m = s.net.find(key);
        REQUIRE(m != nullptr);
        for (const std::string& suffix : m->file_order()) {
            const std::string n = key + "." + suffix;
            std::vector<uint16_t> raw(size_t(f.info(n).numel()));
            f.read(n, raw.data(), DType::f16);
            h.update(raw.data(), raw.size() * 2);
        }
    }
    CHECK(md.at("sshs_model_hash") == "0x" + h.hex());
}

TEST_CASE("lycoris files: the tiny files LyCORIS wrote load whole and give the weights its forward applies") {
    const nlohmann::json j = read_json("kohya_tiny.json");
    const gl::io::SafetensorsFile expected(lyco("kohya_tiny_expected.safetensors"));
    for (const std::string name : {"loha", "lokr", "dora"}) {
        CAPTURE(name);
        const gl::io::SafetensorsFile file(lyco("kohya_tiny_" + name + ".safetensors"));
        TinyTree t(file, expected);
        REQUIRE(t.net.modules().size() == kTinyPaths.size());
        const lora::LoadReport r = lora::load_lora(file, t.net, *t.rt);
        CHECK(r.modules == kTinyPaths.size());
        CHECK(r.unexpected.empty());
        // Each module's keys in LyCORIS's order.
        const std::vector<std::string> order = j.at("files").at(name).at("state_dict_order");
        std::vector<std::string> ours;
        for (const std::string& path : kTinyPaths) {
            const bool te = path.rfind("text_model.", 0) == 0;
            const lora::Module* m = t.net.find(lora::kohya_key(models::sd15_family(), te ? lora::Part::text_encoder : lora::Part::unet, path));
            REQUIRE(m != nullptr);
            for (const std::string& s : m->file_order()) ours.push_back(m->key() + "." + s);
        }
        CHECK(ours == order);
        lora::merge_into(t.net, *t.rt, lora::Part::unet, t.wu, *t.rt);
        lora::merge_into(t.net, *t.rt, lora::Part::text_encoder, t.wt, *t.rt);
        double worst = 0;
        for (const lora::Module& m : t.net.modules()) {
            const double e = rel_error(t.weight(m), read_f32(expected, gl::cat(name, ".merged.", m.key())));
            CHECK_MESSAGE(e < 1e-6, m.key());
            worst = std::max(worst, e);
        }
        MESSAGE("kohya_tiny_", name, ": ", t.net.title(), ", ", t.net.modules().size(),
                " modules, worst merged-weight rel. error ", worst);
    }
}

TEST_CASE("lycoris files: every tensor maps in ComfyUI's loader, and in stable-diffusion.cpp's but dora_scale / lokr_t2") {
    const nlohmann::json j = read_json("kohya_sd15.json");
    Sd15 names_of(lycoris_config(4, 1.0, {}));
    const std::set<std::string> names = comfy_lora_names(names_of.wu);
    auto check = [&](const std::string& what, const std::set<std::string>& file) {
        CAPTURE(what);
        const std::set<std::string> comfy = comfy_loaded(file, names), sdcpp = sdcpp_loaded(file, names);
        std::set<std::string> not_comfy, not_sdcpp, expected_not_sdcpp;
        for (const std::string& k : file) {
            if (!comfy.count(k)) not_comfy.insert(k);
            if (!sdcpp.count(k)) not_sdcpp.insert(k);
            const std::string s = k.substr(k.find('.') + 1);
            if (s == "dora_scale" || s == "lokr_t2") expected_not_sdcpp.insert(k);
        }
        CHECK(not_comfy.empty());
        CHECK(not_sdcpp == expected_not_sdcpp);
        MESSAGE(what, ": ", file.size(), " tensors, ComfyUI loads all, stable-diffusion.cpp ignores ",
                not_sdcpp.size(), " (dora_scale, lokr_t2)");
    };
    for (const std::string name : {"loha_conv4_tucker", "lokr_f4_decompose_both_tucker", "lokr_dora", "locon_dora",
                             "lora_dora_in_attn_mlp_bf16", "lokr_f8_dim100000"}) {
        Sd15 s(config_of(j.at("configs").at(name)));
        const std::vector<std::string> k = file_keys(s.net);
        check(name, std::set<std::string>(k.begin(), k.end()));
    }
    for (const std::string name : {"loha", "lokr", "dora"}) {  // LyCORIS's own files
        const gl::io::SafetensorsFile f(lyco("kohya_tiny_" + name + ".safetensors"));
        std::set<std::string> k;
        for (const gl::io::TensorInfo& t : f.list()) k.insert(t.name);
        check(gl::cat("LyCORIS's kohya_tiny_", name), k);
    }
}
