// LoHa, LoKr, LoCon and DoRA (lora/loha.cpp, lokr.cpp, locon.cpp, dora.cpp) against LyCORIS's own
// modules on tiny Linear and Conv2d layers (tests/golden/make_lycoris_golden.py; NOTES.md there):
// for every case the forward output, the weight the forward applies (our merge), the gradients of
// sum(y * gy) for every tensor and x, and the output at multiplier 0.5, with the module read from
// the case's tensors under their file keys; the same module built from network args has LyCORIS's
// tensors, shapes and init; LoKr's factorisation table.
#include <algorithm>
#include <cmath>

#include "lycoris_fixtures.h"

using namespace lyco_test;
using gltest::read_f32;
using gltest::rel_error;

namespace {

struct Case {
    std::string name;
    nlohmann::json c;
    std::vector<std::pair<std::string, std::string>> args;  // network args as kohya passes them
};

std::vector<Case> cases() {
    const nlohmann::json j = read_json("cases.json");
    std::vector<Case> out;
    for (const auto& [name, c] : j.at("cases").items()) {
        Case k{name, c, {{"algo", c.at("algo")}}};
        const nlohmann::json& kw = c.at("kwargs");
        if (kw.value("weight_decompose", false)) k.args.emplace_back("dora_wd", "True");
        if (kw.contains("wd_on_out")) k.args.emplace_back("wd_on_output", kw.at("wd_on_out").get<bool>() ? "True" : "False");
        if (kw.value("use_tucker", false)) k.args.emplace_back("use_tucker", "True");
        if (kw.contains("factor")) k.args.emplace_back("factor", std::to_string(kw.at("factor").get<int>()));
        if (kw.value("decompose_both", false)) k.args.emplace_back("decompose_both", "True");
        out.push_back(std::move(k));
    }
    REQUIRE(out.size() == 20);
    return out;
}

std::vector<float> multipliers(const Case& k) {
    std::vector<float> m;
    if (k.c.at("kwargs").contains("multipliers"))
        for (double v : k.c.at("kwargs").at("multipliers")) m.push_back(float(v));
    return m;
}

// A layer with the case's base and its module, built from the network args (training's module)
// or as the case's tensors say (a file's view: what txt2img and gl-merge build), the tensors loaded.
struct Built {
    gl::io::SafetensorsFile golden;
    std::shared_ptr<Renamed> params;
    std::unique_ptr<OneLayer> layer;
    Built(const Case& k, float multiplier, bool from_file) : golden(lyco(k.c.at("file").get<std::string>())) {
        const std::string pre = k.name + ".param.";
        const std::string key = k.c.at("layer").at("kind") == "conv2d"
                                    ? (k.c.at("layer").at("k") == 1 ? "lora_unet_down_blocks_0_resnets_0_conv_shortcut"
                                                                    : "lora_unet_down_blocks_0_resnets_0_conv1")
                                    : "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q";
        params = std::make_shared<Renamed>(golden, [&](const std::string& n) {
            return n.rfind(pre, 0) == 0 ? key + "." + n.substr(pre.size()) : std::string();
        });
        lora::LoraConfig cfg;
        if (from_file) {
            cfg.from_file = std::make_shared<lora::FileModules>(params, lora::LdmNames{});
        } else {
            const nlohmann::json& alpha = k.c.at("alpha_arg");
            cfg = lycoris_config(k.c.at("dim"), alpha.is_null() ? 0.0 : alpha.get<double>(), k.args);
        }
        cfg.multiplier = multiplier;
        layer = std::make_unique<OneLayer>(cfg, k.c.at("layer"), k.c.at("tensors").at("x").get<std::vector<int64_t>>());
        REQUIRE(layer->net.modules().size() == 1);
        layer->write_base(read_f32(golden, k.name + ".base.weight"), read_f32(golden, k.name + ".base.bias"));
        layer->write_inputs(read_f32(golden, k.name + ".x"), read_f32(golden, k.name + ".gy"));
        const lora::LoadReport r = lora::load_lora(*params, layer->net, *layer->rt);
        CHECK(r.unexpected.empty());
        CHECK(r.modules == 1);
        layer->rt->run();
    }
    const lora::Module& module() const { return layer->net.modules()[0]; }
};

// LyCORIS's HadaWeightTucker.backward builds w1_a's gradient from w2's Tucker product (and w2_a's
// from w1's): its recorded gradients of those two are not the gradient. Ours is checked against
// finite differences instead (the loss is linear in each of them).
bool lycoris_gradient_is_wrong(const Case& k, const std::string& suffix) {
    return k.c.at("tucker").get<bool>() && k.c.at("algo") == "loha" && (suffix == "hada_w1_a" || suffix == "hada_w2_a");
}

double finite_difference_error(Built& b, const lora::Tensor& t) {
    OneLayer& L = *b.layer;
    const std::vector<float> analytic = L.grad_file(t), base = L.rt->read_f32(t.id);
    double worst = 0;
    for (size_t i = 0; i < base.size(); i++) {
        std::vector<float> v = base;
        const float h = 0.5f;
        v[i] = base[i] + h;
        L.rt->write_f32(t.id, v);
        L.rt->run();
        const double lp = L.rt->read_f32(L.loss)[0];
        v[i] = base[i] - h;
        L.rt->write_f32(t.id, v);
        L.rt->run();
        const double lm = L.rt->read_f32(L.loss)[0];
        const double fd = (lp - lm) / (2.0 * h);
        // The graph's element order is the file's for every tensor of these types but LoCon's down.
        worst = std::max(worst, std::fabs(fd - analytic[i]) / (1.0 + std::fabs(fd)));
    }
    L.rt->write_f32(t.id, base);
    L.rt->run();
    return worst;
}

}  // namespace

TEST_CASE("lycoris golden: LoHa, LoKr, LoCon and DoRA give LyCORIS's forward, merged weight and gradients") {
    double worst_y = 0, worst_w = 0, worst_g = 0;
    for (const Case& k : cases()) {
        CAPTURE(k.name);
        Built f(k, 1.0f, false);
        OneLayer& L = *f.layer;
        const lora::Module& m = f.module();
        CHECK(std::string(m.type().algo()) == (k.c.at("algo") == "locon" ? "lora" : k.c.at("algo").get<std::string>()));
        CHECK(m.scale(1.0f) == doctest::Approx(k.c.at("scale").get<double>()).epsilon(1e-6));

        const double ey = rel_error(L.y_torch(), read_f32(f.golden, k.name + ".y"));
        const double ey64 = rel_error(L.y_torch(), read_f32(f.golden, k.name + ".y_f64"));
        double eg = rel_error(L.grad_x_torch(), read_f32(f.golden, k.name + ".grad.x"));
        for (const lora::Tensor& t : m.tensors()) {
            CAPTURE(t.suffix);
            const double e = rel_error(L.grad_file(t), read_f32(f.golden, k.name + ".grad." + t.suffix));
            if (lycoris_gradient_is_wrong(k, t.suffix)) {
                const double fd = finite_difference_error(f, t);
                MESSAGE(k.name, ": ", t.suffix, "'s gradient differs from LyCORIS's by ", e,
                        " (its Tucker backward's bug); against finite differences ", fd);
                CHECK(e > 0.1);
                CHECK(fd < 1e-4);
                continue;
            }
            CHECK(e < 2e-5);
            eg = std::max(eg, e);
        }
        lora::merge_into(L.net, *L.rt, lora::Part::unet, L.w, *L.rt);
        const double ew = rel_error(L.weight(), read_f32(f.golden, k.name + ".merged"));
        // The module as a file holds it (a LoRA's alpha folded into up) gives the same.
        Built ff(k, 1.0f, true);
        const double eyf = rel_error(ff.layer->y_torch(), read_f32(f.golden, k.name + ".y"));
        lora::merge_into(ff.layer->net, *ff.layer->rt, lora::Part::unet, ff.layer->w, *ff.layer->rt);
        const double ewf = rel_error(ff.layer->weight(), read_f32(f.golden, k.name + ".merged"));
        MESSAGE(k.name, ": y rel. error ", ey, " (vs fp64 ", ey64, "), merged weight ", ew, ", gradients ", eg,
                "; read as a file: y ", eyf, ", merged ", ewf);
        CHECK(ey < 1e-5);
        CHECK(ey64 < 1e-5);
        CHECK(ew < 1e-6);
        CHECK(eg < 2e-5);
        CHECK(eyf < 1e-5);
        CHECK(ewf < 1e-6);
        worst_y = std::max({worst_y, ey, eyf}), worst_w = std::max({worst_w, ew, ewf}), worst_g = std::max(worst_g, eg);

        for (float mult : multipliers(k)) {
            Built h(k, mult, false);
            const std::string pre = k.name + ".m" + gl::cat(mult) + ".";
            const double e = rel_error(h.layer->y_torch(), read_f32(f.golden, pre + "y"));
            MESSAGE(k.name, " at multiplier ", mult, ": y rel. error ", e);
            CHECK(e < 1e-5);
            if (k.c.at("kwargs").value("weight_decompose", false)) {
                lora::merge_into(h.layer->net, *h.layer->rt, lora::Part::unet, h.layer->w, *h.layer->rt);
                CHECK(rel_error(h.layer->weight(), read_f32(f.golden, pre + "merged")) < 1e-6);
            }
        }
    }
    MESSAGE("worst over the cases: y ", worst_y, ", merged weight ", worst_w, ", gradients ", worst_g);
}

TEST_CASE("lycoris golden: modules built from network args have LyCORIS's tensors, shapes and init") {
    for (const Case& k : cases()) {
        CAPTURE(k.name);
        const nlohmann::json& alpha = k.c.at("alpha_arg");
        OneLayer L(lycoris_config(k.c.at("dim"), alpha.is_null() ? 0.0 : alpha.get<double>(), k.args), k.c.at("layer"),
                   k.c.at("tensors").at("x").get<std::vector<int64_t>>());
        REQUIRE(L.net.modules().size() == 1);
        const lora::Module& m = L.net.modules()[0];
        std::map<std::string, std::vector<int64_t>> got;
        for (const lora::Tensor& t : m.tensors()) got[t.suffix] = t.file_shape;
        got["alpha"] = {};
        std::map<std::string, std::vector<int64_t>> want;
        for (const auto& [s, shape] : k.c.at("file_tensors").items()) want[s] = shape.get<std::vector<int64_t>>();
        CHECK(got == want);
        CHECK(m.file_alpha() == doctest::Approx(k.c.at("alpha_saved").get<double>()));
        CHECK(m.scale(1.0f) == doctest::Approx(k.c.at("scale").get<double>()).epsilon(1e-6));

        gl::io::SafetensorsFile golden(lyco(k.c.at("file").get<std::string>()));
        L.write_base(read_f32(golden, k.name + ".base.weight"), read_f32(golden, k.name + ".base.bias"));
        L.net.init(*L.rt, 7);
        for (const lora::Tensor& t : m.tensors()) {
            CAPTURE(t.suffix);
            const nlohmann::json& init = k.c.at("init").at(t.suffix);
            const std::vector<float> v = L.rt->read_f32(t.id);
            const std::string rule = init.at("rule");
            double lo = 0, hi = 0, sum = 0, sq = 0;
            for (float e : v) lo = std::min(lo, double(e)), hi = std::max(hi, double(e)), sum += e, sq += double(e) * e;
            const double n = double(v.size()), stddev = std::sqrt(std::max(0.0, sq / n - (sum / n) * (sum / n)));
            if (init.at("zero").get<bool>()) {
                CHECK(lo == 0.0);
                CHECK(hi == 0.0);
            } else if (rule.rfind("kaiming_uniform", 0) == 0) {
                int64_t fan = 1;
                for (size_t i = 1; i < t.file_shape.size(); i++) fan *= t.file_shape[i];
                const double bound = 1.0 / std::sqrt(double(fan));
                CHECK(hi <= bound);
                CHECK(lo >= -bound);
                CHECK(hi - lo > 0.0);
            } else if (rule.rfind("normal", 0) == 0) {
                const double want_std = rule.find("0.1") != std::string::npos ? 0.1 : 1.0;
                CHECK(stddev > 0.5 * want_std);
                CHECK(stddev < 1.6 * want_std);
            } else if (t.suffix == "dora_scale") {
                CHECK(rel_error(v, read_f32(golden, k.name + ".init.dora_scale")) < 1e-6);
            } else {
                FAIL("unknown init rule ", rule);
            }
        }
    }
}

TEST_CASE("lycoris golden: LoKr factors dimensions as LyCORIS's factorization() does") {
    const nlohmann::json table = read_json("cases.json").at("factorization");
    size_t n = 0;
    for (const auto& [dim, by_factor] : table.items())
        for (const auto& [factor, pair] : by_factor.items()) {
            CAPTURE(dim);
            CAPTURE(factor);
            // A dim x dim Linear with a huge rank: both factors full, lokr_w1 [a, a] with (a, b) the pair.
            const int64_t d = std::stoll(dim);
            gl::Graph g;
            nn::Weights w(g, DType::f32);
            lora::LoraNetwork net(lycoris_config(100000, 1.0, {{"algo", "lokr"}, {"factor", factor}}));
            net.attach_unet(w);
            nn::WeightScope s(w, "mid_block.attentions.0.transformer_blocks.0.attn1");
            nn::linear(w, "to_q", g.input("x", DType::f32, {1, d}), d, false);  // built, never run
            REQUIRE(net.modules().size() == 1);
            const lora::Module& m = net.modules()[0];
            const std::vector<int64_t> a = pair.get<std::vector<int64_t>>();
            CHECK(m.tensor("lokr_w1")->file_shape == std::vector<int64_t>{a[0], a[0]});
            CHECK(m.tensor("lokr_w2")->file_shape == std::vector<int64_t>{a[1], a[1]});
            n++;
        }
    CHECK(n == 23 * 7);
}
