// The files of lycoris.kohya networks (lora/kohya.h, lora/network_args.h) against what LyCORIS
// builds and writes (tests/golden/data/lycoris/kohya_sd15.json, kohya_tiny*): SD1.5's modules, keys
// and shapes for each config and preset, the saved file's dtype, metadata and LyCORIS's
// sshs_model_hash; the files LyCORIS wrote load into our network and give its forward's weights;
// every tensor of a file maps in ComfyUI's loader (modelled on comfy/lora.py load_lora and
// model_lora_keys_unet / _clip); and stable-diffusion.cpp's loader (tests/sdcpp_names.h: its name
// conversion and lora.hpp at 97d2990) applies each tensor to its module's layer but for the ones
// it leaves, named: dora_scale and lokr_t2 (never read), every tensor of a module on conv_in,
// conv_out or time_embedding.linear_1/2 (its whole-name table never converts a LoRA tensor's
// name there, so LyCORIS's presets put modules there that sd.cpp never finds), and a Tucker LoKr
// conv, whose factors make its apply graph assert (ggml_mul_mat; NOTES.md section 8 says how that
// and the names were run on sd.cpp's own code). kohya's networks.lora files (LoRA, LoCon) apply
// whole.
#include <optional>
#include <set>

#include "ggml-lite/io/sha256.h"
#include "lycoris_fixtures.h"
#include "sdcpp_names.h"

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

// stable-diffusion.cpp's SD1.5 model (tests/sdcpp_names.h applies a file to it): the UNet's
// weights under LDM names (sd::unet_key_original, checked against diffusers' converter in
// test_sd15_*), the text encoder as a single file holds it (transformers' CLIPTextModel names under
// cond_stage_model.transformer., q/k/v split: clip.hpp fuses them only for a file with in_proj).
sdcpp::Shapes sdcpp_sd15(const Sd15& s) {
    sdcpp::Shapes m;
    for (const nn::WeightEntry& e : s.wu.entries())
        m[sd::unet_key_original(sd::UnetConfig::sd15(), e.name)] = torch_shape(s.g.shape(e.id));
    for (const nn::WeightEntry& e : s.wt.entries()) m["cond_stage_model.transformer." + e.name] = torch_shape(s.g.shape(e.id));
    return m;
}
// The model tensor a module's layer has in it.
std::string sdcpp_tensor_of(bool te, const std::string& path) {
    return te ? "cond_stage_model.transformer." + path + ".weight"
              : sd::unet_key_original(sd::UnetConfig::sd15(), path + ".weight");
}
// The modules whose names stable-diffusion.cpp never converts (convert_diffusers_unet_to_original_sd1
// maps these four layers by whole-name equality only).
bool sdcpp_unconverted(const std::string& key) {
    for (const char* m : {"lora_unet_conv_in.", "lora_unet_conv_out.", "lora_unet_time_embedding_linear_1.",
                          "lora_unet_time_embedding_linear_2."})
        if (key.rfind(m, 0) == 0) return true;
    return false;
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

TEST_CASE("lycoris files: every tensor maps in ComfyUI's loader, stable-diffusion.cpp leaves dora_scale, lokr_t2 and the conv_in / conv_out / time_embedding modules") {
    const nlohmann::json j = read_json("kohya_sd15.json");
    Sd15 names_of(lycoris_config(4, 1.0, {}));
    const std::set<std::string> names = comfy_lora_names(names_of.wu);
    const sdcpp::Shapes sd15 = sdcpp_sd15(names_of);
    // file: key -> shape; model: sd.cpp's tensors; layer_of: module key -> its layer's model tensor.
    auto check = [&](const std::string& what, const sdcpp::Shapes& file, const sdcpp::Shapes& model,
                     const std::map<std::string, std::string>& layer_of) {
        CAPTURE(what);
        std::set<std::string> keys;
        for (const auto& [k, shape] : file) keys.insert(k);
        const std::set<std::string> comfy = comfy_loaded(keys, names);
        size_t not_comfy = 0;
        for (const std::string& k : keys) not_comfy += !comfy.count(k);
        CHECK(not_comfy == 0);

        const sdcpp::Result r = sdcpp::apply(file, model);
        CHECK(r.skipped.empty());
        // What sd.cpp leaves: dora_scale and lokr_t2 (no such suffix in lora_suffix_map, and
        // lora.hpp reads neither), every tensor of a module on conv_in, conv_out or
        // time_embedding.linear_1/2 (named "...conv_in.weight.<part>", "...time_embedding.linear.1
        // .weight.<part>": no model tensor), and a Tucker LoKr conv's whole module: its
        // lokr_w2_a (R, out_k) goes to ggml_mul_mat as an up factor (out_k, R), so the graph
        // asserts (out_k != R) and the process aborts.
        std::set<std::string> expected, aborting;
        size_t n_dora = 0, n_t2 = 0, n_unconverted = 0, n_tucker = 0;
        for (const auto& [k, shape] : file) {
            const std::string module = k.substr(0, k.find('.')), part = k.substr(k.find('.') + 1);
            const bool tucker_lokr = !sdcpp_unconverted(k) && file.count(module + ".lokr_t2") &&
                                     file.count(module + ".lokr_w2_a") &&
                                     file.at(module + ".lokr_w2_a").at(1) != file.at(module + ".lokr_w2_a").at(0);
            if (sdcpp_unconverted(k)) {
                n_unconverted++;
            } else if (part == "dora_scale") {
                n_dora++;
            } else if (part == "lokr_t2") {
                n_t2++;
            } else if (tucker_lokr) {
                n_tucker++;
            } else {
                continue;
            }
            expected.insert(k);
            if (tucker_lokr) aborting.insert(layer_of.at(module));
        }
        std::set<std::string> aborts;
        for (const auto& [tensor, why] : r.aborts) aborts.insert(tensor);
        const std::set<std::string> unused = r.unused(file);
        CHECK(unused == expected);
        if (unused != expected)
            for (const std::string& k : unused)
                if (!expected.count(k)) {
                    FAIL_CHECK("unexpectedly unused: ", k, " as ", sdcpp::lora_name(k));
                    break;
                }
        CHECK(aborts == aborting);
        // Each applied tensor patches its own module's layer.
        size_t wrong = 0;
        for (const auto& [k, tensor] : r.applied)
            if (tensor != layer_of.at(k.substr(0, k.find('.'))) && wrong++ < 3)
                FAIL_CHECK(k, " -> ", tensor, ", want ", layer_of.at(k.substr(0, k.find('.'))));
        CHECK(wrong == 0);
        MESSAGE(what, ": ", file.size(), " tensors, ComfyUI loads all; stable-diffusion.cpp applies ", r.applied.size(),
                ", leaves ", unused.size(), " (", n_dora, " dora_scale, ", n_t2, " lokr_t2, ", n_unconverted,
                " of conv_in / conv_out / time_embedding modules, ", n_tucker, " of Tucker LoKr convs)",
                aborts.empty() ? std::string() : gl::cat("; its graph asserts on ", aborts.size(), " model tensors, first ",
                                                         *aborts.begin()));
    };
    std::map<std::string, std::string> layer_of;  // SD1.5's modules (preset full holds them all)
    for (const lora::Module& m : names_of.net.modules())
        layer_of[m.key()] = sdcpp_tensor_of(m.layer().part == lora::Part::text_encoder, m.layer().path);
    for (const auto& [name, c] : j.at("configs").items()) {
        Sd15 s(config_of(c));
        sdcpp::Shapes file;
        for (const lora::Module& m : s.net.modules())
            for (const auto& [suffix, shape] : file_tensors(m)) file[m.key() + "." + suffix] = shape;
        REQUIRE(file.size() == c.at("keys").get<size_t>());
        check(name, file, sd15, layer_of);
    }
    // Each preset (LoCon, LyCORIS's default algo): the modules it puts on those four layers.
    std::map<std::string, size_t> unconverted_modules;
    for (const auto& [preset, p] : j.at("presets").items()) {
        Sd15 s(lycoris_config(8, 4.0, {{"preset", preset}}));
        sdcpp::Shapes file;
        for (const lora::Module& m : s.net.modules()) {
            for (const auto& [suffix, shape] : file_tensors(m)) file[m.key() + "." + suffix] = shape;
            unconverted_modules[preset] += sdcpp_unconverted(m.key() + ".");
        }
        check("preset " + preset, file, sd15, layer_of);
    }
    CHECK(unconverted_modules == std::map<std::string, size_t>{{"attn-mlp", 0}, {"attn-only", 0}, {"full", 4},
                                                               {"full-lin", 2}, {"unet-convblock-only", 2},
                                                               {"unet-only", 4}, {"unet-transformer-only", 0}});
    // kohya's own networks.lora (LoRA; LoCon with conv_dim) targets Transformer2DModel (and
    // ResnetBlock2D, Downsample2D, Upsample2D), never conv_in / conv_out / time_embedding: all applies.
    for (const auto& [name, args] : std::vector<std::pair<std::string, std::vector<std::pair<std::string, std::string>>>>{
             {"networks.lora", {}}, {"networks.lora conv_dim=4", {{"conv_dim", "4"}, {"conv_alpha", "1"}}}}) {
        Sd15 s(lora::network_config({"networks.lora", 4, 1.0, std::nullopt, args}));
        sdcpp::Shapes file;
        for (const lora::Module& m : s.net.modules())
            for (const auto& [suffix, shape] : file_tensors(m)) file[m.key() + "." + suffix] = shape;
        CHECK(sdcpp::apply(file, sd15).unused(file).empty());
        check(name, file, sd15, layer_of);
    }
    const gl::io::SafetensorsFile expected(lyco("kohya_tiny_expected.safetensors"));
    sdcpp::Shapes tiny;  // the tiny tree as sd.cpp would hold it
    std::map<std::string, std::string> tiny_layer_of;
    for (const std::string& path : kTinyPaths) {
        const bool te = path.rfind("text_model.", 0) == 0;
        const std::string key = lora::kohya_key(models::sd15_family(), te ? lora::Part::text_encoder : lora::Part::unet, path);
        tiny_layer_of[key] = sdcpp_tensor_of(te, path);
        tiny[tiny_layer_of[key]] = expected.info("base." + key).shape;
    }
    for (const std::string name : {"loha", "lokr", "dora"}) {  // LyCORIS's own files
        const gl::io::SafetensorsFile f(lyco("kohya_tiny_" + name + ".safetensors"));
        sdcpp::Shapes file;
        for (const gl::io::TensorInfo& t : f.list()) file[t.name] = t.shape;
        check(gl::cat("LyCORIS's kohya_tiny_", name), file, tiny, tiny_layer_of);
    }
}

TEST_CASE("lycoris files: tests/sdcpp_names.h gives stable-diffusion.cpp's own names and update shapes") {
    // sdcpp.json: stable-diffusion.cpp's name_conversion.cpp and ggml_extend.hpp's merge functions
    // on ggml, run by tests/golden/make_sdcpp_names.py (every module name of the SD1.5 / tiny / SD2.x
    // files, every suffix on a few, every module tensor group of the SD1.5 configs and tiny files).
    const nlohmann::json j = read_json("sdcpp.json");
    CHECK(j.at("names_sd2_differ").empty());  // VERSION_SD2 converts these keys as VERSION_SD1 does
    size_t bad = 0;
    for (const auto& [key, name] : j.at("names").items())
        if (sdcpp::lora_name(key) != name.get<std::string>() && bad++ < 5)
            FAIL_CHECK(key, ": sd.cpp ", name.get<std::string>(), ", modelled ", sdcpp::lora_name(key));
    CHECK(bad == 0);
    // The modelled update of a module's tensors (sdcpp::apply's combinations): its ne or "ABORT".
    auto modelled = [](const std::string& algo, const std::map<std::string, sdcpp::Ne>& t) -> std::string {
        auto has = [&](const char* n) { return t.count(n) != 0; };
        try {
            sdcpp::Ne d;
            if (algo == "lora") {
                d = sdcpp::merge_lora(t.at("lora_down"), t.at("lora_up"), has("lora_mid") ? &t.at("lora_mid") : nullptr);
            } else if (algo == "loha") {
                const bool t1 = has("hada_t1"), t2 = has("hada_t2");
                d = sdcpp::merge_lora(t.at("hada_w1_b"), t1 ? sdcpp::transpose(t.at("hada_w1_a")) : t.at("hada_w1_a"),
                                      t1 ? &t.at("hada_t1") : nullptr);
                const sdcpp::Ne d2 = sdcpp::merge_lora(t.at("hada_w2_b"),
                                                       t2 ? sdcpp::transpose(t.at("hada_w2_a")) : t.at("hada_w2_a"),
                                                       t2 ? &t.at("hada_t2") : nullptr);
                if (!(d2 == d)) return "LoHa halves differ";
            } else {
                if (algo != "lokr") return "algo " + algo;
                const sdcpp::Ne w1 = has("lokr_w1") ? t.at("lokr_w1") : sdcpp::merge_lora(t.at("lokr_w1_b"), t.at("lokr_w1_a"));
                const sdcpp::Ne w2 = has("lokr_w2") ? t.at("lokr_w2") : sdcpp::merge_lora(t.at("lokr_w2_b"), t.at("lokr_w2_a"));
                d = sdcpp::kronecker(w1, w2);
            }
            return gl::cat(d.ne[0], ",", d.ne[1], ",", d.ne[2], ",", d.ne[3]);
        } catch (const sdcpp::Abort&) {
            return "ABORT";
        }
    };
    size_t aborts = 0, groups = 0;
    for (const nlohmann::json& e : j.at("shapes")) {
        const std::string line = e.at(0), want = e.at(1);
        CAPTURE(line);
        std::istringstream is(line);
        std::string algo, kv;
        is >> algo;
        std::map<std::string, sdcpp::Ne> t;
        while (is >> kv) {
            std::vector<int64_t> s;
            std::stringstream ss(kv.substr(kv.find('=') + 1));
            for (std::string x; std::getline(ss, x, ',');) s.push_back(std::stoll(x));
            t[kv.substr(0, kv.find('='))] = sdcpp::ne_of(s);
        }
        CHECK(modelled(algo, t) == want);
        aborts += want == "ABORT";
        groups++;
    }
    CHECK(aborts == 13);  // the Tucker LoKr convs' shapes
    // The values (not modelled here, pinned): sd.cpp's update of each single-layer case without
    // DoRA on ggml's CPU backend against LyCORIS's forward. Right but for the Tucker LoHa conv
    // (the core's R axes swapped and out / in transposed: ~1.28) and the LoKr conv whose lokr_w2 is
    // a full 4-D factor (ggml_ext_kronecker's axis pairing: ~1.36); the Tucker LoKr aborts, as the
    // shape model says.
    const nlohmann::json cases = read_json("cases.json").at("cases");
    size_t right = 0;
    for (const auto& [name, v] : j.at("values").items()) {
        CAPTURE(name);
        std::map<std::string, sdcpp::Ne> t;
        std::string algo = "lokr";
        for (const auto& [k, shape] : cases.at(name).at("tensors").items()) {
            if (k.rfind("param.", 0) != 0 || k == "param.alpha" || k == "param.lokr_t2") continue;
            std::string part = k.substr(6);
            if (part.size() > 7 && part.compare(part.size() - 7, 7, ".weight") == 0) part.resize(part.size() - 7);
            if (part == "lora_up") algo = "lora";
            if (part == "hada_w1_a") algo = "loha";
            t[part] = sdcpp::ne_of(shape.get<std::vector<int64_t>>());
        }
        CHECK((modelled(algo, t) == "ABORT") == v.is_string());
        if (v.is_string()) {
            CHECK(name == "lokr_conv3x3_f2_dim2_tucker");
        } else if (name == "loha_conv3x3_tucker" || name == "lokr_conv3x3_f2_dim4_full") {
            CHECK(v.get<double>() > 1.0);
        } else {
            CHECK(v.get<double>() < 1e-6);
            right++;
        }
    }
    CHECK(right == 11);
    MESSAGE(j.at("names").size(), " names and ", groups, " update shapes (", aborts,
            " asserting) as stable-diffusion.cpp ", j.at("stable_diffusion_cpp").get<std::string>(), " on ggml ",
            j.at("ggml").get<std::string>(), " gives them");
}
