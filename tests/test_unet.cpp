// The SD1.5 UNet graph: the real config's size and plan, the original-checkpoint key map,
// input gradients against finite differences and under recompute, bad configs and inputs,
// and (tests/golden/data/unet/) diffusers' outputs and input gradients in both checkpoint layouts.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "ggml-lite/core/autodiff.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/io/safetensors.h"
#include "ggml-lite/ops/builder.h"
#include "models/sd15/unet.h"
#include "test_util.h"

using namespace gl;
using gltest::rel_error;
using sd::UnetConfig;

namespace {

int64_t parameter_count(const Graph& g, const sd::Weights& w) {
    int64_t n = 0;
    for (const sd::WeightEntry& e : w.entries()) n += g.shape(e.id).numel();
    return n;
}

// The tiny UNet's graph: x and context as parameters (so autodiff gives their gradients),
// loss = sum(eps * r) for a fixed random r.
struct TinyNet {
    Graph g;
    sd::Weights w{g, DType::f32};
    UnetConfig c = UnetConfig::tiny();
    ValueId x, t, ctx, r, eps, loss = kNoValue;
    Gradients grads;
    std::vector<std::pair<ValueId, std::vector<float>>> data;

    TinyNet(int64_t B, int64_t H, int64_t W, int64_t S, bool with_backward) {
        x = g.param("x", DType::f32, {B, H, W, c.in_channels});
        t = g.input("t", DType::f32, {B});
        ctx = g.param("context", DType::f32, {B, S, c.cross_attention_dim});
        eps = sd::unet_forward(w, c, x, t, ctx);
        g.mark_output(eps);
        r = g.input("r", DType::f32, g.shape(eps));
        if (with_backward) {
            loss = sum(g, mul(g, eps, r));
            g.mark_output(loss);
            grads = backward(g, loss);
        }
        std::mt19937 rng(7);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        auto rnd = [&](ValueId v, float s, float offset) {
            std::vector<float> d(size_t(g.shape(v).numel()));
            for (float& e : d) e = offset + s * u(rng);
            data.emplace_back(v, std::move(d));
        };
        for (const sd::WeightEntry& e : w.entries()) {
            const Shape s = g.shape(e.id);
            const bool norm_gain = e.name.find("norm") != std::string::npos && e.name.ends_with(".weight");
            const int64_t fan_in = s.nd == 1 ? 1 : s.numel() / s[0];
            if (norm_gain) rnd(e.id, 0.2f, 1.0f);
            else rnd(e.id, s.nd == 1 ? 0.1f : 1.0f / std::sqrt(float(fan_in)), 0.0f);
        }
        rnd(x, 1.0f, 0.0f);
        rnd(ctx, 1.0f, 0.0f);
        rnd(r, 1.0f, 0.0f);
        std::vector<float> tv;
        for (int64_t b = 0; b < B; b++) tv.push_back(float(37 + 410 * b));
        data.emplace_back(t, tv);
    }

    std::unique_ptr<Runtime> run(Recompute rc = Recompute::none) const {
        PlanOptions o;
        o.recompute = rc;
        auto rt = make_cpu_runtime(make_plan(g, o));
        rt->poison(0xff);
        for (auto& [v, d] : data) rt->write_f32(v, d);
        rt->run();
        return rt;
    }
};

}  // namespace

TEST_CASE("unet: the SD1.5 config has 859.52 M parameters and plans at 64x64") {
    Graph g;
    sd::Weights w(g, DType::bf16);
    const UnetConfig c = UnetConfig::sd15();
    ValueId x = g.input("x", DType::bf16, {2, 64, 64, 4});
    ValueId t = g.input("t", DType::f32, {2});
    ValueId ctx = g.input("context", DType::bf16, {2, 77, 768});
    ValueId eps = sd::unet_forward(w, c, x, t, ctx);
    g.mark_output(eps);
    CHECK(g.shape(eps) == Shape{2, 64, 64, 4});
    CHECK(parameter_count(g, w) == 859520964);
    CHECK(w.entries().size() == 686);
    // Segments: 22 resnets (2 per down block, 2 mid, 3 per up block) and 16 transformers (2 per
    // cross-attention down block, 1 mid, 3 per cross-attention up block).
    CHECK(g.segment_names.size() == 22 + 16);
    CHECK(g.segment_names.front() == "down_blocks.0.resnets.0");

    Plan p = make_plan(g);
    CHECK(check_overlaps(p) == "");
    CHECK(p.arena_bytes[int(Category::frozen)] >= size_t(859520964) * 2);
}

TEST_CASE("unet: the SD1.5 backward plans at 64x64, with a lower peak when blocks recompute") {
    // The latents as the parameter: the backward then runs through every block, as a LoRA's does.
    Graph g;
    sd::Weights w(g, DType::bf16);
    ValueId x = g.param("x", DType::bf16, {1, 64, 64, 4});
    ValueId eps = sd::unet_forward(w, UnetConfig::sd15(), x, g.input("t", DType::f32, {1}),
                                   g.input("context", DType::bf16, {1, 77, 768}));
    ValueId loss = mse_loss(g, eps, g.input("target", DType::bf16, g.shape(eps)));
    g.mark_output(loss);
    backward(g, loss);
    PlanOptions blocks;
    blocks.recompute = Recompute::blocks;
    Plan keep = make_plan(g), rec = make_plan(g, blocks);
    CHECK(check_overlaps(keep) == "");
    CHECK(check_overlaps(rec) == "");
    CHECK(rec.recompute_nodes > 0);
    CHECK(rec.peak_live_bytes < keep.peak_live_bytes);
}

TEST_CASE("unet: original-checkpoint keys are unique, complete and in the LDM layout") {
    Graph g;
    sd::Weights w(g, DType::f32);
    const UnetConfig c = UnetConfig::sd15();
    sd::unet_forward(w, c, g.input("x", DType::f32, {1, 8, 8, 4}), g.input("t", DType::f32, {1}),
                     g.input("c", DType::f32, {1, 77, 768}));
    std::set<std::string> keys;
    for (const sd::WeightEntry& e : w.entries()) {
        std::string k = sd::unet_key_original(c, e.name);
        CHECK_MESSAGE(!k.empty(), e.name);
        CHECK_MESSAGE(keys.insert(k).second, e.name, " -> ", k, " twice");
        CHECK(sd::unet_key_diffusers(e.name) == e.name);
    }
    const std::pair<const char*, const char*> known[] = {
        {"time_embedding.linear_1.weight", "time_embed.0.weight"},
        {"time_embedding.linear_2.bias", "time_embed.2.bias"},
        {"conv_in.weight", "input_blocks.0.0.weight"},
        {"down_blocks.0.resnets.0.norm1.weight", "input_blocks.1.0.in_layers.0.weight"},
        {"down_blocks.0.attentions.1.transformer_blocks.0.attn1.to_q.weight",
         "input_blocks.2.1.transformer_blocks.0.attn1.to_q.weight"},
        {"down_blocks.0.downsamplers.0.conv.weight", "input_blocks.3.0.op.weight"},
        {"down_blocks.1.resnets.0.conv_shortcut.weight", "input_blocks.4.0.skip_connection.weight"},
        {"down_blocks.1.resnets.0.time_emb_proj.bias", "input_blocks.4.0.emb_layers.1.bias"},
        {"down_blocks.2.downsamplers.0.conv.bias", "input_blocks.9.0.op.bias"},
        {"down_blocks.3.resnets.1.conv2.weight", "input_blocks.11.0.out_layers.3.weight"},
        {"mid_block.resnets.0.conv1.weight", "middle_block.0.in_layers.2.weight"},
        {"mid_block.attentions.0.proj_out.bias", "middle_block.1.proj_out.bias"},
        {"mid_block.resnets.1.norm2.bias", "middle_block.2.out_layers.0.bias"},
        {"up_blocks.0.resnets.2.conv_shortcut.weight", "output_blocks.2.0.skip_connection.weight"},
        {"up_blocks.0.upsamplers.0.conv.weight", "output_blocks.2.1.conv.weight"},
        {"up_blocks.1.attentions.2.norm.weight", "output_blocks.5.1.norm.weight"},
        {"up_blocks.1.upsamplers.0.conv.bias", "output_blocks.5.2.conv.bias"},
        {"up_blocks.3.attentions.2.transformer_blocks.0.ff.net.0.proj.weight",
         "output_blocks.11.1.transformer_blocks.0.ff.net.0.proj.weight"},
        {"conv_norm_out.weight", "out.0.weight"},
        {"conv_out.bias", "out.2.bias"},
    };
    for (auto [name, key] : known) CHECK(sd::unet_key_original(c, name) == std::string("model.diffusion_model.") + key);
    for (std::string bad : {"down_blocks.3.attentions.0.norm.weight", "down_blocks.3.downsamplers.0.conv.weight",
                            "up_blocks.3.upsamplers.0.conv.weight", "down_blocks.0.resnets.2.conv1.weight",
                            "up_blocks.4.resnets.0.conv1.weight", "mid_block.resnets.2.conv1.weight",
                            "down_blocks.0.resnets.0.norm3.weight", "down_blocks.x.resnets.0.conv1.weight",
                            "text_model.embeddings.token_embedding.weight", ""})
        CHECK_MESSAGE(sd::unet_key_original(c, bad).empty(), bad);
}

TEST_CASE("unet: tiny model input gradients match finite differences and recompute") {
    TinyNet net(2, 8, 8, 5, true);
    auto rt = net.run();
    const std::vector<float> eps = rt->read_f32(net.eps), gx = rt->read_f32(net.grads[net.x]),
                             gc = rt->read_f32(net.grads[net.ctx]);
    for (float e : eps) REQUIRE(std::isfinite(e));

    // Bitwise identical with every resnet and transformer recomputed.
    auto rr = net.run(Recompute::blocks);
    CHECK(rr->plan().recompute_nodes > 0);
    CHECK(rr->read_f32(net.grads[net.x]) == gx);
    CHECK(rr->read_f32(net.grads[net.ctx]) == gc);
    CHECK(rr->read_f32(net.eps) == eps);
    // ... and with the one-pass ops (norms, GEGLU, casts) recomputed.
    auto rc = net.run(Recompute::cheap);
    CHECK(rc->plan().recompute_nodes > 0);
    CHECK(rc->plan().peak_live_bytes < rt->plan().peak_live_bytes);
    CHECK(rc->read_f32(net.grads[net.x]) == gx);
    CHECK(rc->read_f32(net.grads[net.ctx]) == gc);
    CHECK(rc->read_f32(net.eps) == eps);

    // Central differences of the loss on a few elements of x and of the context. The loss runs
    // in f32, so the step is large and the tolerance loose: this catches wiring, not rounding.
    TinyNet fwd(2, 8, 8, 5, false);
    auto leaf = [&](ValueId v) -> std::vector<float>& {
        for (auto& [id, d] : fwd.data)
            if (id == v) return d;
        FAIL("no data for value ", v);
        throw;
    };
    auto loss_at = [&](ValueId v, size_t i, float delta) {
        const float keep = leaf(v)[i];
        leaf(v)[i] = keep + delta;
        const std::vector<float> e = fwd.run()->read_f32(fwd.eps), &rv = leaf(fwd.r);
        leaf(v)[i] = keep;
        double s = 0;
        for (size_t k = 0; k < e.size(); k++) s += double(e[k]) * double(rv[k]);
        return s;
    };
    const float h = 1e-2f;
    for (auto [v, g, idxs] : {std::tuple{fwd.x, &gx, std::vector<size_t>{0, 77, 300, 511}},
                              std::tuple{fwd.ctx, &gc, std::vector<size_t>{0, 41, 159}}}) {
        for (size_t i : idxs) {
            const double fd = (loss_at(v, i, h) - loss_at(v, i, -h)) / (2 * h);
            CHECK_MESSAGE(std::abs(fd - (*g)[i]) <= 5e-3 * (1 + std::abs(fd)), "element ", i, ": ", fd, " vs ", (*g)[i]);
        }
    }
}

TEST_CASE("unet: bad configs and inputs are refused with a clear error") {
    UnetConfig c = UnetConfig::tiny();
    c.norm_groups = 5;
    CHECK_THROWS_WITH_AS(c.validate(), doctest::Contains("norm_groups"), gl::Error);
    c = UnetConfig::tiny();
    c.heads = 3;
    CHECK_THROWS_WITH_AS(c.validate(), doctest::Contains("heads"), gl::Error);
    c = UnetConfig::tiny();
    c.up.pop_back();
    CHECK_THROWS_WITH_AS(c.validate(), doctest::Contains("block types"), gl::Error);

    c = UnetConfig::tiny();
    Graph g;
    sd::Weights w(g, DType::f32);
    ValueId t = g.input("t", DType::f32, {1});
    ValueId ctx = g.input("c", DType::f32, {1, 3, 16});
    CHECK_THROWS_WITH_AS(sd::unet_forward(w, c, g.input("x", DType::f32, {1, 8, 8, 3}), t, ctx),
                         doctest::Contains("NHWC"), gl::Error);
    CHECK_THROWS_WITH_AS(sd::unet_forward(w, c, g.input("x", DType::f32, {1, 0, 8, 4}), t, ctx),
                         doctest::Contains("empty latent size 0x8"), gl::Error);
    CHECK_THROWS_WITH_AS(sd::unet_forward(w, c, g.input("x", DType::f32, {1, 8, 8, 4}), t,
                                          g.input("c2", DType::f32, {1, 3, 8})),
                         doctest::Contains("context"), gl::Error);
    CHECK_THROWS_WITH_AS(sd::unet_forward(w, c, g.input("x", DType::f32, {2, 8, 8, 4}), t, ctx),
                         doctest::Contains("t must be"), gl::Error);
}

namespace {

std::filesystem::path golden_dir() { return std::filesystem::path(__FILE__).parent_path() / "golden" / "data" / "unet"; }

std::vector<float> read_tensor(const io::TensorSource& src, const std::string& name, Shape* shape = nullptr) {
    io::TensorInfo info = src.info(name);
    std::vector<float> d(size_t(info.numel()));
    src.read(name, d.data(), DType::f32);
    if (shape) *shape = Shape::of(info.shape);
    return d;
}

struct GoldenRun {
    std::vector<float> eps, grad_x, grad_ctx;
    sd::LoadReport report;
};

// Builds the tiny UNet with the golden inputs' shapes, loads weights from `weights` (layout
// detected), runs forward and backward of sum(eps * r) on the CPU.
GoldenRun run_golden(const io::TensorSource& inputs, const io::TensorSource& weights) {
    Shape xs, ts, cs, rs;
    std::vector<float> xv = read_tensor(inputs, "x", &xs), tv = read_tensor(inputs, "t", &ts),
                       cv = read_tensor(inputs, "context", &cs), rv = read_tensor(inputs, "r", &rs);
    Graph g;
    sd::Weights w(g, DType::f32);
    ValueId x = g.param("x", DType::f32, xs), t = g.input("t", DType::f32, ts);
    ValueId ctx = g.param("context", DType::f32, cs), r = g.input("r", DType::f32, rs);
    ValueId eps = sd::unet_forward(w, UnetConfig::tiny(), x, t, ctx);
    g.mark_output(eps);
    ValueId loss = sum(g, mul(g, eps, r));
    g.mark_output(loss);
    Gradients gr = backward(g, loss);
    auto rt = make_cpu_runtime(make_plan(g));
    rt->poison(0xff);
    GoldenRun out;
    out.report = sd::load_unet(w, UnetConfig::tiny(), weights, *rt);
    rt->write_f32(x, xv);
    rt->write_f32(t, tv);
    rt->write_f32(ctx, cv);
    rt->write_f32(r, rv);
    rt->run();
    out.eps = rt->read_f32(eps);
    out.grad_x = rt->read_f32(gr[x]);
    out.grad_ctx = rt->read_f32(gr[ctx]);
    return out;
}

}  // namespace

TEST_CASE("unet golden: tiny model matches diffusers (f64) in both checkpoint layouts") {
    const std::filesystem::path dir = golden_dir();
    io::SafetensorsFile inputs((dir / "io.safetensors").string());
    io::SafetensorsFile diffusers((dir / "unet_diffusers.safetensors").string());
    io::SafetensorsFile original((dir / "unet_original.safetensors").string());
    CHECK(sd::detect_unet_layout(diffusers) == sd::UnetLayout::diffusers);
    CHECK(sd::detect_unet_layout(original) == sd::UnetLayout::original);
    CHECK_THROWS_WITH_AS(sd::detect_unet_layout(inputs), doctest::Contains("io.safetensors: no UNet found"), gl::Error);

    GoldenRun a = run_golden(inputs, diffusers);
    GoldenRun b = run_golden(inputs, original);
    for (const GoldenRun* run : {&a, &b}) {
        CHECK(run->report.missing.empty());
        CHECK(run->report.unexpected.empty());
        CHECK(run->report.tensors == diffusers.list().size());
    }
    // Same tensors under other names: bitwise the same results.
    CHECK(a.eps == b.eps);
    CHECK(a.grad_x == b.grad_x);
    CHECK(a.grad_ctx == b.grad_ctx);

    const double e_eps = rel_error(a.eps, read_tensor(inputs, "eps"));
    const double e_gx = rel_error(a.grad_x, read_tensor(inputs, "grad_x"));
    const double e_gc = rel_error(a.grad_ctx, read_tensor(inputs, "grad_context"));
    CHECK(e_eps <= 1e-4);
    CHECK(e_gx <= 1e-4);
    CHECK(e_gc <= 1e-4);
    MESSAGE("unet rel. errors vs diffusers: eps ", e_eps, ", grad x ", e_gx, ", grad context ", e_gc);
}

namespace {

// An original single file as the UNet loader meets it: the UNet beside other models' tensors,
// plus one stray tensor under the UNet's prefix.
class SingleFile : public io::TensorSource {
public:
    explicit SingleFile(const io::TensorSource& unet) : unet_(unet) {}
    std::string origin() const override { return "single file"; }
    std::vector<io::TensorInfo> list() const override {
        std::vector<io::TensorInfo> l = unet_.list();
        for (const char* n : kExtra) l.push_back(io::TensorInfo{n, DType::f32, {2}});
        return l;
    }
    bool has(const std::string& name) const override { return unet_.has(name) || extra(name); }
    io::TensorInfo info(const std::string& name) const override {
        return extra(name) ? io::TensorInfo{name, DType::f32, {2}} : unet_.info(name);
    }
    void read(const std::string& name, void* dst, DType to) const override {
        REQUIRE(!extra(name));
        unet_.read(name, dst, to);
    }

private:
    static constexpr const char* kExtra[] = {"first_stage_model.decoder.conv_in.weight",
                                             "cond_stage_model.transformer.text_model.final_layer_norm.bias",
                                             "model_ema.decay", "alphas_cumprod", "model.diffusion_model.stray.weight"};
    static bool extra(const std::string& n) {
        for (const char* e : kExtra)
            if (n == e) return true;
        return false;
    }
    const io::TensorSource& unet_;
};

}  // namespace

TEST_CASE("unet: a single file's other models are not unexpected, a stray UNet key is") {
    io::SafetensorsFile original((golden_dir() / "unet_original.safetensors").string());
    SingleFile file(original);
    Graph g;
    sd::Weights w(g, DType::f32);
    sd::unet_forward(w, UnetConfig::tiny(), g.input("x", DType::f32, {1, 8, 8, 4}), g.input("t", DType::f32, {1}),
                     g.input("c", DType::f32, {1, 3, 16}));
    auto rt = make_cpu_runtime(make_plan(g));
    sd::LoadReport r = sd::load_unet(w, UnetConfig::tiny(), file, *rt);
    CHECK(r.missing.empty());
    CHECK(r.unexpected == std::vector<std::string>{"model.diffusion_model.stray.weight"});
    CHECK(r.tensors == original.list().size());
}

TEST_CASE("unet golden: every SD1.5 weight has diffusers' name, shape and original key") {
    // sd15_keys.txt: "diffusers_key original_key d0,d1,..." per tensor of diffusers' SD1.5 UNet.
    std::ifstream f(golden_dir() / "sd15_keys.txt");
    REQUIRE(f.good());
    Graph g;
    sd::Weights w(g, DType::bf16);
    const UnetConfig c = UnetConfig::sd15();
    sd::unet_forward(w, c, g.input("x", DType::bf16, {1, 8, 8, 4}), g.input("t", DType::f32, {1}),
                     g.input("c", DType::bf16, {1, 77, 768}));
    std::map<std::string, const sd::WeightEntry*> ours;
    for (const sd::WeightEntry& e : w.entries()) ours[e.name] = &e;
    std::string line;
    size_t lines = 0;
    while (std::getline(f, line)) {
        std::istringstream ls(line);
        std::string name, key, dims;
        REQUIRE((ls >> name >> key >> dims));
        lines++;
        auto it = ours.find(name);
        if (it == ours.end()) {
            FAIL_CHECK("no weight named ", name);
            continue;
        }
        CHECK_MESSAGE(sd::unet_key_original(c, name) == key, name);
        // Our leaf in PyTorch's order: OHWI back to OIHW; 1x1-conv projections stay [O, I].
        std::vector<int64_t> want;
        for (std::stringstream ds(dims); std::getline(ds, line, ',');) want.push_back(std::stoll(line));
        Shape s = g.shape(it->second->id);
        std::vector<int64_t> have = it->second->layout == sd::WeightLayout::conv_ohwi
                                        ? std::vector<int64_t>{s[0], s[3], s[1], s[2]}
                                        : s.vec();
        while (want.size() > have.size() && want.back() == 1) want.pop_back();
        CHECK_MESSAGE(have == want, name);
    }
    CHECK(lines == ours.size());
}
