// kohya's block-wise networks.lora, LoRA+ and max norm against kohya's own networks/lora.py
// (tests/golden/make_kohya_network_golden.py): the block of every module, the lr weights of
// the args, which modules a network has at which rank and alpha, its parameter groups and lrs,
// and apply_max_norm_regularization on given tensors.
#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "ggml-lite/ops/builder.h"
#include "lora/max_norm.h"
#include "lora/network_args.h"
#include "lora_fixtures.h"
#include "test_util.h"
#include "train/step.h"

namespace {

using json = nlohmann::json;

const json& golden() {
    static const json j = [] {
        std::ifstream f(gltest::golden_dir("kohya") + "network_blocks.json");
        REQUIRE(f);
        return json::parse(f);
    }();
    return j;
}

std::vector<std::pair<std::string, std::string>> kwargs(const json& j) {
    std::vector<std::pair<std::string, std::string>> a;
    for (const auto& [k, v] : j.items()) a.emplace_back(k, v.get<std::string>());
    return a;
}

lora::LoraConfig kohya_network(int dim, double alpha, const json& args) {
    return lora::network_config({"networks.lora", dim, alpha, std::nullopt, kwargs(args)});
}

bool near(double a, double b, double rel) {
    return std::fabs(a - b) <= rel * std::max(std::fabs(b), 1e-30);
}

}  // namespace

TEST_CASE("lora blocks: every module of a LoCon network lies in kohya's block (get_block_index)") {
    std::map<std::string, int> want;
    for (const json& e : golden().at("unet_modules")) want[e[0].get<std::string>()] = e[1].get<int>();
    lora::LoraConfig c;
    c.conv_dim = 4;
    Sd15Graphs s(c);
    std::set<std::string> ours;
    for (const lora::Module& m : s.net.modules()) {
        if (m.layer().part != Part::unet) continue;
        CAPTURE(m.key());
        ours.insert(m.key());
        REQUIRE(want.count(m.key()));
        CHECK(models::sd15_family().lora_block(m.layer().path) == want.at(m.key()));
    }
    CHECK(ours.size() == want.size());
    CHECK(models::sd15_family().lora_blocks().size() == 25);
    CHECK(models::sd15_family().lora_block("conv_in") == -1);
}

TEST_CASE(
    "lora blocks: down / mid / up lr weights, presets, offsets and the threshold as kohya's get_block_lr_weight") {
    for (const json& c : golden().at("lr_weights")) {
        CAPTURE(c.at("kwargs").dump());
        const std::vector<json> want = c.at("weights").get<std::vector<json>>();
        bool negative = false;
        for (const json& w : want) negative = negative || (w.is_number() && w.get<double>() < 0);
        if (negative) {  // kohya hands torch a negative lr, which its optimizers refuse
            CHECK(gltest::error_of([&] { kohya_network(8, 4.0, c.at("kwargs")); })
                      .find("a learning rate must be "
                            "finite and >= 0") != std::string::npos);
            continue;
        }
        const lora::LoraConfig n = kohya_network(8, 4.0, c.at("kwargs"));
        REQUIRE(n.block_lr_weights.size() == want.size());
        for (size_t i = 0; i < want.size(); i++) {
            CAPTURE(i);
            CHECK(near(n.block_lr_weights[i], want[i].get<double>(), 1e-12));
        }
        CHECK_FALSE(n.block_dims.empty());  // lr weights turn the block-wise network on
    }
}

TEST_CASE("lora blocks: block_dims, block_alphas, conv blocks and lr-0 blocks make kohya's modules, groups and lrs") {
    const json& names = golden().at("unet_modules");
    for (const json& c : golden().at("networks")) {
        CAPTURE(c.at("kwargs").dump());
        train::StepOptions o;
        o.latent_h = o.latent_w = 8;
        o.train_text_encoder = true;
        o.text_encoder_lr = float(c.at("lrs").at("text_encoder_lr").get<double>());
        o.unet_lr = float(c.at("lrs").at("unet_lr").get<double>());
        o.lora = kohya_network(c.at("dim").get<int>(), c.at("alpha").get<double>(), c.at("kwargs"));
        const std::unique_ptr<train::StepGraph> s = train::build_step(o);

        // The groups: kohya's descriptions and lrs (ours: the UNet's first, then the text encoder's).
        const std::vector<train::ParamGroup>& groups = s->update->groups();
        std::vector<std::string> ours = train::kohya_group_names(*s);
        if (ours.empty())
            for (const train::ParamGroup& g : groups) ours.push_back(g.name == "unet" ? "unet" : "textencoder");
        std::map<std::string, double> want_lr;
        std::vector<std::string> want_names;
        for (const json& g : c.at("groups")) {
            want_lr[g.at("description").get<std::string>()] = g.at("lr").get<double>();
            want_names.push_back(g.at("description").get<std::string>());
        }
        REQUIRE(ours.size() == want_lr.size());
        std::map<gl::ValueId, std::string> group_of;
        for (size_t i = 0; i < groups.size(); i++) {
            CAPTURE(ours[i]);
            REQUIRE(want_lr.count(ours[i]));
            CHECK(near(groups[i].lr, want_lr.at(ours[i]), 1e-6));
            for (gl::ValueId p : groups[i].params) group_of[p] = ours[i];
        }
        const auto group_name = [&](const json& index) {
            return index.is_null() ? std::string("(none)") : want_names.at(index.get<size_t>());
        };

        // Each UNet module: present or not, its rank and alpha, the groups of its down and up.
        size_t unet_modules = 0;
        for (size_t i = 0; i < names.size(); i++) {
            const std::string key = names[i][0].get<std::string>();
            const json& want = c.at("unet_modules")[i];
            const lora::Module* m = s->net->find(key);
            CAPTURE(key);
            REQUIRE((m != nullptr) == !want.is_null());
            if (!m) continue;
            unet_modules++;
            CHECK(m->rank() == want[0].get<int>());
            CHECK(m->alpha() == doctest::Approx(want[1].get<double>()));
            CHECK(group_of.at(m->param("lora_down.weight")) == group_name(want[2]));
            CHECK(group_of.at(m->param("lora_up.weight")) == group_name(want[3]));
        }
        size_t all = 0;
        for (const lora::Module& m : s->net->modules()) all += m.layer().part == Part::unet;
        CHECK(all == unet_modules);
        // The text encoder's modules: kohya's count, all at the network's rank and alpha.
        const json& te = c.at("te_modules");
        CHECK(count(*s->net, Part::text_encoder) == te.at("count").get<size_t>());
        REQUIRE(te.at("distinct").size() == 1);
        const json& d = te.at("distinct")[0];
        for (const lora::Module& m : s->net->modules()) {
            if (m.layer().part != Part::text_encoder) continue;
            CHECK(m.rank() == d[0].get<int>());
            CHECK(m.alpha() == doctest::Approx(d[1].get<double>()));
            CHECK(group_of.at(m.param("lora_down.weight")) == group_name(d[2]));
            CHECK(group_of.at(m.param("lora_up.weight")) == group_name(d[3]));
        }
    }
}

TEST_CASE("lora blocks: max norm scales up and down as kohya's apply_max_norm_regularization") {
    const json& mn = golden().at("max_norm");
    // The three modules kohya's stand-in network holds, built on layers of their shapes.
    gl::Graph g;
    std::vector<std::unique_ptr<lora::Module>> mods;
    for (const auto& [key, sh] : mn.at("shapes").items()) {
        const std::vector<int64_t> down = sh.at("down").get<std::vector<int64_t>>();
        const std::vector<int64_t> up = sh.at("up").get<std::vector<int64_t>>();
        lora::Layer l;
        l.key = key;
        l.path = key;
        l.in = down[1];
        l.out = up[0];
        l.kind = down.size() == 2 ? models::ModuleKind::linear
                 : down[2] == 1   ? models::ModuleKind::conv1x1
                                  : models::ModuleKind::conv;
        if (l.kind == models::ModuleKind::conv) l.k = int(down[2]), l.pad = 1;
        lora::ModuleSettings st;
        st.rank = int(down[0]);
        st.alpha = float(sh.at("alpha").get<double>());
        mods.push_back(lora::find_module_type("lora")->make(l, st));
        const bool conv = l.kind == models::ModuleKind::conv;
        nn::Weights::LayerCall call;
        call.module = key;
        call.x = conv ? g.input(key + ".x", DType::f32, {1, 4, 4, l.in}) : g.input(key + ".x", DType::f32, {1, l.in});
        const gl::ValueId w = g.weight(key + ".w", DType::f32, l.graph_shape());
        call.weight = gl::QuantWeight{w, gl::kNoValue};
        call.y = conv ? gl::conv2d(g, call.x, w, gl::kNoValue, 1, 1) : gl::linear(g, call.x, w);
        if (conv) call.k = l.k, call.pad = 1;
        mods.back()->build(g, call, lora::BuildEnv{});
    }
    std::vector<const lora::Module*> list;
    for (const auto& m : mods) list.push_back(m.get());
    // kohya's tensors (PyTorch layout) in the graph's: a 3x3 down [r, in, 3, 3] is [r, 3, 3, in] here.
    const auto to_graph = [](const lora::Module& m, const std::string& suffix, const std::vector<float>& v) {
        const lora::Tensor& t = *m.tensor(suffix);
        if (t.conv_k == 1) return v;
        std::vector<float> out(v.size());
        const int64_t R = t.file_shape[0], I = t.file_shape[1], kk = int64_t(t.conv_k) * t.conv_k;
        for (int64_t r = 0; r < R; r++)
            for (int64_t i = 0; i < I; i++)
                for (int64_t p = 0; p < kk; p++) out[size_t((r * kk + p) * I + i)] = v[size_t((r * I + i) * kk + p)];
        return out;
    };
    for (const json& c : mn.at("cases")) {
        CAPTURE(c.at("max_norm").get<double>());
        std::map<gl::ValueId, std::vector<float>> store;
        for (const auto& m : mods)
            for (const char* suffix : {"lora_down.weight", "lora_up.weight"})
                store[m->param(suffix)] =
                    to_graph(*m, suffix, c.at("before").at(m->key() + "." + suffix).get<std::vector<float>>());
        const lora::MaxNormReport r = lora::apply_max_norm(
            list, c.at("max_norm").get<double>(), [&](gl::ValueId v) { return store.at(v); },
            [&](gl::ValueId v, const std::vector<float>& x) { store[v] = x; });
        CHECK(r.keys_scaled == c.at("keys_scaled").get<int>());
        CHECK(near(r.average_key_norm, c.at("average_key_norm").get<double>(), 1e-6));
        CHECK(near(r.max_key_norm, c.at("max_key_norm").get<double>(), 1e-6));
        for (const auto& m : mods)
            for (const char* suffix : {"lora_down.weight", "lora_up.weight"}) {
                CAPTURE(m->key() + "." + suffix);
                const std::vector<float> want =
                    to_graph(*m, suffix, c.at("after").at(m->key() + "." + suffix).get<std::vector<float>>());
                const std::vector<float>& got = store.at(m->param(suffix));
                REQUIRE(got.size() == want.size());
                for (size_t i = 0; i < got.size(); i++) CHECK(near(got[i], want[i], 1e-6));
            }
    }
}

TEST_CASE("lora blocks: with --dim_from_weights only the lr weights act, as kohya's create_network_from_weights") {
    lora::NetworkOptions o{"networks.lora", 4, 1.0, std::nullopt,
                           {{"block_dims", "2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2"},
                            {"down_lr_weight", "linear"},
                            {"loraplus_lr_ratio", "4"}}};
    o.dim_from_weights = true;
    const lora::LoraConfig c = lora::network_config(o);
    CHECK(c.block_dims.empty());
    CHECK_FALSE(c.loraplus_unet);
    CHECK(c.block_lr_weights.size() == 25);
    CHECK(c.block_lr_weights[1] == doctest::Approx(1.0 / 11));
    size_t noted = 0;
    for (const std::string& n : c.notes) noted += n.find("no effect with --dim_from_weights") != std::string::npos;
    CHECK(noted == 2);
    // An unknown preset is refused (kohya's error message for it raises a TypeError).
    CHECK(gltest::error_of([] {
              lora::network_config({"networks.lora", 4, 1.0, std::nullopt, {{"down_lr_weight", "sin"}}});
          }).find("unknown lr_weight preset 'sin'") != std::string::npos);
}
