// CLIP text encoder: weight names, clip_skip, causality, kohya's long-prompt joining, the key
// layouts of each checkpoint kind, recompute, and transformers' numbers (golden data).
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "ggml-lite/core/autodiff.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/io/safetensors.h"
#include "models/sd15/clip.h"

using namespace gl;
using namespace sd;

namespace {

struct Lcg {
    uint64_t s;
    explicit Lcg(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
    uint64_t next() {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        return s >> 33;
    }
    float uniform() { return float(next() % 2000001) / 1000000.0f - 1.0f; }  // [-1, 1]
};

// An in-memory f32 checkpoint.
class MemSource : public io::TensorSource {
public:
    struct T {
        std::vector<int64_t> shape;
        std::vector<float> data;
    };
    std::map<std::string, T> tensors;

    explicit MemSource(std::string origin) : origin_(std::move(origin)) {}
    void add(const std::string& k, std::vector<int64_t> s, std::vector<float> d) { tensors[k] = {std::move(s), std::move(d)}; }
    std::string origin() const override { return origin_; }
    std::vector<io::TensorInfo> list() const override {
        std::vector<io::TensorInfo> out;
        for (const auto& [k, t] : tensors) out.push_back({k, DType::f32, t.shape});
        return out;
    }
    bool has(const std::string& k) const override { return tensors.count(k) != 0; }
    io::TensorInfo info(const std::string& k) const override {
        GL_CHECK(has(k), origin_, ": no tensor ", k);
        return {k, DType::f32, tensors.at(k).shape};
    }
    void read(const std::string& k, void* dst, DType to) const override {
        GL_CHECK(to == DType::f32, "MemSource reads f32 only");
        const std::vector<float>& d = tensors.at(k).data;
        std::memcpy(dst, d.data(), d.size() * sizeof(float));
    }

private:
    std::string origin_;
};

// Random weights for cfg in layout l, plus whatever extra keys a checkpoint of that kind holds.
MemSource random_checkpoint(const ClipConfig& cfg, ClipLayout l, uint64_t seed) {
    Graph g;
    nn::Weights w(g, DType::f32);
    build_clip(w, g, g.input("ids", DType::i32, {1, cfg.max_pos}), cfg);
    MemSource src("random.safetensors");
    Lcg r(seed);
    for (const nn::WeightEntry& e : w.entries()) {
        std::vector<float> d(size_t(g.v(e.id).numel()));
        const bool norm_weight = e.name.find("norm") != std::string::npos && e.name.ends_with(".weight");
        for (float& x : d) x = norm_weight ? 1.0f + 0.1f * r.uniform() : 0.2f * r.uniform();
        src.add(clip_key(l, e.name), g.shape(e.id).vec(), d);
    }
    return src;
}

struct Encoded {
    std::vector<float> out;
    Shape shape;
};

Encoded encode(const ClipConfig& cfg, const io::TensorSource& src, const std::vector<int32_t>& ids, int64_t n, int clip_skip,
               int chunks = 0) {
    Graph g;
    nn::Weights w(g, DType::f32);
    ValueId in = g.input("ids", DType::i32, {n, int64_t(ids.size()) / n});
    ValueId out = chunks ? build_clip_chunked(w, g, in, chunks, cfg, clip_skip) : build_clip(w, g, in, cfg, clip_skip);
    g.mark_output(out);
    auto rt = make_cpu_runtime(make_plan(g));
    rt->poison(0xff);
    load_clip(w, src, *rt);
    rt->write(in, ids.data(), DType::i32);
    rt->run();
    return {rt->read_f32(out), g.shape(out)};
}

std::vector<int32_t> random_ids(int64_t n, int64_t L, int64_t vocab, uint64_t seed) {
    Lcg r(seed);
    std::vector<int32_t> ids(size_t(n * L));
    for (int32_t& x : ids) x = int32_t(r.next() % uint64_t(vocab));
    return ids;
}

}  // namespace

TEST_CASE("clip: weights are named by transformers' keys and each layer is a segment") {
    const ClipConfig cfg = ClipConfig::tiny();
    Graph g;
    nn::Weights w(g, DType::f32);
    build_clip(w, g, g.input("ids", DType::i32, {2, 77}), cfg);
    std::set<std::string> names;
    for (const nn::WeightEntry& e : w.entries()) names.insert(e.name);
    CHECK(names.size() == size_t(2 + 16 * cfg.layers + 2));
    for (const char* k : {"text_model.embeddings.token_embedding.weight", "text_model.embeddings.position_embedding.weight",
                          "text_model.encoder.layers.0.self_attn.q_proj.weight",
                          "text_model.encoder.layers.1.self_attn.out_proj.bias", "text_model.encoder.layers.1.mlp.fc1.weight",
                          "text_model.encoder.layers.0.layer_norm2.bias", "text_model.final_layer_norm.weight"})
        CHECK_MESSAGE(names.count(k), k);
    CHECK(g.segment_names == std::vector<std::string>{"text_model.encoder.layers.0", "text_model.encoder.layers.1"});

    // The full-size encoder has ViT-L/14's 123M parameters.
    Graph gl14;
    nn::Weights wl(gl14, DType::bf16);
    build_clip(wl, gl14, gl14.input("ids", DType::i32, {1, 77}), ClipConfig::vit_l14());
    int64_t params = 0;
    for (const nn::WeightEntry& e : wl.entries()) params += gl14.v(e.id).numel();
    CHECK(params == 123060480);
}

TEST_CASE("clip: clip_skip k runs the first L-k+1 layers, then the final layer norm") {
    ClipConfig cfg = ClipConfig::tiny();
    cfg.layers = 3;
    const MemSource src = random_checkpoint(cfg, ClipLayout::transformers, 1);
    const std::vector<int32_t> ids = random_ids(2, 77, cfg.vocab, 2);
    ClipConfig one = cfg;
    one.layers = 1;
    // A 3-layer model with clip_skip 3 is the 1-layer model with the same first layer (the
    // loader skips the unbuilt layers without calling them unexpected).
    CHECK(encode(cfg, src, ids, 2, 3).out == encode(one, src, ids, 2, 1).out);
    CHECK(encode(cfg, src, ids, 2, 2).out != encode(cfg, src, ids, 2, 1).out);
    Graph g;
    nn::Weights w(g, DType::f32);
    ValueId in = g.input("ids", DType::i32, {1, 77});
    CHECK_THROWS_WITH_AS(build_clip(w, g, in, cfg, 0), doctest::Contains("clip_skip 0"), gl::Error);
    CHECK_THROWS_WITH_AS(build_clip(w, g, in, cfg, 4), doctest::Contains("clip_skip 4"), gl::Error);
}

TEST_CASE("clip: attention is causal") {
    const ClipConfig cfg = ClipConfig::tiny();
    const MemSource src = random_checkpoint(cfg, ClipLayout::transformers, 3);
    std::vector<int32_t> a = random_ids(1, 77, cfg.vocab, 4), b = a;
    const int64_t j = 30, D = cfg.width;
    b[j] = (b[j] + 1) % int32_t(cfg.vocab);
    Encoded ea = encode(cfg, src, a, 1, 1), eb = encode(cfg, src, b, 1, 1);
    CHECK(ea.shape == Shape{1, 77, D});
    for (int64_t t = 0; t < 77; t++) {
        bool same = std::memcmp(&ea.out[size_t(t * D)], &eb.out[size_t(t * D)], size_t(D) * sizeof(float)) == 0;
        CHECK_MESSAGE(same == (t < j), "token ", t);
    }
}

TEST_CASE("clip: long prompts keep <BOS>, each chunk's 75 inner states and the last state, as kohya") {
    const ClipConfig cfg = ClipConfig::tiny();
    const MemSource src = random_checkpoint(cfg, ClipLayout::transformers, 5);
    const int64_t B = 2, n = 3, L = 77, D = cfg.width;
    const std::vector<int32_t> ids = random_ids(B * n, L, cfg.vocab, 6);
    Encoded rows = encode(cfg, src, ids, B * n, 1), joined = encode(cfg, src, ids, B * n, 1, int(n));
    REQUIRE(joined.shape == Shape{B, n * (L - 2) + 2, D});
    auto row = [&](int64_t chunk_row, int64_t t) { return &rows.out[size_t((chunk_row * L + t) * D)]; };
    for (int64_t b = 0; b < B; b++) {
        std::vector<const float*> want{row(b * n, 0)};
        for (int64_t k = 0; k < n; k++)
            for (int64_t t = 1; t < L - 1; t++) want.push_back(row(b * n + k, t));
        want.push_back(row(b * n + n - 1, L - 1));
        for (size_t t = 0; t < want.size(); t++)
            CHECK(std::memcmp(&joined.out[size_t((b * (n * (L - 2) + 2) + int64_t(t)) * D)], want[t],
                              size_t(D) * sizeof(float)) == 0);
    }
    // One chunk is the plain encoding.
    CHECK(encode(cfg, src, random_ids(B, L, cfg.vocab, 7), B, 1, 1).out ==
          encode(cfg, src, random_ids(B, L, cfg.vocab, 7), B, 1).out);
    Graph g;
    CHECK_THROWS_WITH_AS(join_clip_chunks(g, g.input("h", DType::f32, {5, 77, 8}), 2), doctest::Contains("chunks"),
                         gl::Error);
}

TEST_CASE("clip: every checkpoint layout loads to the same encoder") {
    const ClipConfig cfg = ClipConfig::tiny();
    CHECK(clip_key(ClipLayout::transformers, "text_model.final_layer_norm.bias") == "text_model.final_layer_norm.bias");
    CHECK(clip_key(ClipLayout::original, "text_model.encoder.layers.0.mlp.fc2.weight") ==
          "cond_stage_model.transformer.text_model.encoder.layers.0.mlp.fc2.weight");
    CHECK(clip_key(ClipLayout::original_older, "text_model.embeddings.token_embedding.weight") ==
          "cond_stage_model.transformer.embeddings.token_embedding.weight");
    CHECK(clip_key(ClipLayout::transformers_flat, "text_model.encoder.layers.1.layer_norm1.weight") ==
          "encoder.layers.1.layer_norm1.weight");
    CHECK_THROWS_AS(clip_key(ClipLayout::original, "down_blocks.0.resnets.0.conv1.weight"), gl::Error);

    const std::vector<int32_t> ids = random_ids(1, 77, cfg.vocab, 8);
    const std::vector<float> ref = encode(cfg, random_checkpoint(cfg, ClipLayout::transformers, 9), ids, 1, 1).out;
    for (ClipLayout l : {ClipLayout::transformers_flat, ClipLayout::original, ClipLayout::original_older}) {
        CAPTURE(clip_layout_name(l));
        MemSource src = random_checkpoint(cfg, l, 9);
        src.add(clip_key(l, "text_model.embeddings.position_ids"), {1, 77}, std::vector<float>(77));
        if (l != ClipLayout::transformers_flat) {  // what else a single file holds: the UNet, the VAE
            src.add("model.diffusion_model.input_blocks.0.0.weight", {4}, {1, 2, 3, 4});
            src.add("first_stage_model.decoder.conv_in.bias", {2}, {0, 0});
        }
        CHECK(detect_clip_layout(src) == l);
        CHECK(encode(cfg, src, ids, 1, 1).out == ref);
        Graph g;
        nn::Weights w(g, DType::f32);
        g.mark_output(build_clip(w, g, g.input("ids", DType::i32, {1, 77}), cfg));
        auto rt = make_cpu_runtime(make_plan(g));
        nn::LoadReport r = load_clip(w, src, *rt);
        CHECK(r.unexpected.empty());
        CHECK(r.tensors == w.entries().size());
    }
}

TEST_CASE("clip: a missing, misshapen or absent text encoder is named") {
    const ClipConfig cfg = ClipConfig::tiny();
    Graph g;
    nn::Weights w(g, DType::f32);
    g.mark_output(build_clip(w, g, g.input("ids", DType::i32, {1, 77}), cfg));
    auto rt = make_cpu_runtime(make_plan(g));

    MemSource empty("unet_only.safetensors");
    empty.add("model.diffusion_model.out.2.bias", {4}, {0, 0, 0, 0});
    CHECK_THROWS_WITH_AS(load_clip(w, empty, *rt), doctest::Contains("unet_only.safetensors: no CLIP text encoder"),
                         gl::Error);

    const MemSource full = random_checkpoint(cfg, ClipLayout::original, 10);
    MemSource partial("partial.safetensors"), wrong("wrong.safetensors");
    for (const auto& [k, t] : full.tensors) {
        if (k.find("layers.1.mlp.fc2.weight") == std::string::npos) partial.add(k, t.shape, t.data);
        std::vector<int64_t> s = t.shape;
        if (k.find("layers.0.self_attn.k_proj.weight") != std::string::npos) s = {s[1], s[0] + 1};
        wrong.add(k, s, std::vector<float>(size_t(s[0] * (s.size() > 1 ? s[1] : 1))));
    }
    CHECK_THROWS_WITH_AS(load_clip(w, partial, *rt),
                         doctest::Contains("text_model.encoder.layers.1.mlp.fc2.weight "
                                           "(cond_stage_model.transformer.text_model.encoder.layers.1.mlp.fc2.weight)"),
                         gl::Error);
    CHECK_THROWS_WITH_AS(load_clip(w, wrong, *rt), doctest::Contains("layers.0.self_attn.k_proj.weight has shape"),
                         gl::Error);
}

TEST_CASE("clip: gradients with respect to the input embeddings are identical with recompute") {
    const ClipConfig cfg = ClipConfig::tiny();
    const MemSource src = random_checkpoint(cfg, ClipLayout::transformers, 11);
    const int64_t N = 2, L = 77, D = cfg.width;
    Lcg r(12);
    std::vector<float> emb(size_t(N * L * D)), R(emb.size());
    for (float& x : emb) x = 0.1f * r.uniform();
    for (float& x : R) x = r.uniform();
    std::vector<float> grads[3];
    for (Recompute policy : {Recompute::none, Recompute::blocks, Recompute::cheap}) {
        Graph g;
        nn::Weights w(g, DType::f32);
        ValueId e = g.param("inputs_embeds", DType::f32, {N, L, D}), rr = g.input("R", DType::f32, {N, L, D});
        ValueId loss = sum(g, mul(g, build_clip_from_embeds(w, g, e, cfg, 1), rr));
        g.mark_output(loss);
        Gradients gr = backward(g, loss);
        auto rt = make_cpu_runtime(make_plan(g, {policy}));
        CHECK((rt->plan().recompute_nodes > 0) == (policy != Recompute::none));
        rt->poison(0xff);
        load_clip(w, src, *rt);
        rt->write_f32(e, emb);
        rt->write_f32(rr, R);
        rt->run();
        grads[int(policy)] = rt->read_f32(gr[e]);
    }
    CHECK(grads[0] == grads[1]);
    CHECK(grads[0] == grads[2]);
    double norm = 0;
    for (float x : grads[0]) norm += double(x) * x;
    CHECK(norm > 0);
}

// ---------------- golden: transformers' CLIPTextModel (tests/golden/make_clip_golden.py) ----------------

namespace {

std::filesystem::path clip_golden_dir() {
    return std::filesystem::path(__FILE__).parent_path() / "golden" / "data" / "clip";
}

template <class T>
std::vector<T> read_all(const io::TensorSource& s, const std::string& k, DType t) {
    std::vector<T> d(size_t(s.info(k).numel()));
    s.read(k, d.data(), t);
    return d;
}

// max |got - want| / max |want|: the error relative to the tensor's scale (elementwise ratios
// blow up where a value happens to cross zero).
double rel_err(const std::vector<float>& got, const std::vector<float>& want) {
    REQUIRE(got.size() == want.size());
    double num = 0, den = 0;
    for (size_t i = 0; i < got.size(); i++) {
        num = std::max(num, std::abs(double(got[i]) - double(want[i])));
        den = std::max(den, std::abs(double(want[i])));
    }
    return num / den;
}

// Output and d sum(out * R) / d inputs_embeds, through the inputs_embeds entry point.
std::pair<std::vector<float>, std::vector<float>> encode_with_grad(const ClipConfig& cfg, const io::TensorSource& weights,
                                                                   const io::TensorSource& io, int clip_skip) {
    const Shape s = Shape::of(io.info("inputs_embeds").shape);
    Graph g;
    nn::Weights w(g, DType::f32);
    ValueId e = g.param("inputs_embeds", DType::f32, s), r = g.input("R", DType::f32, s);
    ValueId out = build_clip_from_embeds(w, g, e, cfg, clip_skip);
    ValueId loss = sum(g, mul(g, out, r));
    g.mark_output(out);
    g.mark_output(loss);
    Gradients gr = backward(g, loss);
    auto rt = make_cpu_runtime(make_plan(g, {Recompute::blocks}));
    rt->poison(0xff);
    nn::LoadReport rep = load_clip(w, weights, *rt);
    // The token embedding is not part of this graph, and the only weight the loader leaves unused.
    REQUIRE(rep.unexpected.size() == 1);
    CHECK(rep.unexpected[0].ends_with("embeddings.token_embedding.weight"));
    rt->write_f32(e, read_all<float>(io, "inputs_embeds", DType::f32));
    rt->write_f32(r, read_all<float>(io, "R", DType::f32));
    rt->run();
    return {rt->read_f32(out), rt->read_f32(gr[e])};
}

}  // namespace

TEST_CASE("clip golden: tiny encoder matches transformers (f64) in both checkpoint layouts") {
    const std::filesystem::path dir = clip_golden_dir();
    REQUIRE_MESSAGE(std::filesystem::exists(dir / "clip_tiny_io.safetensors"),
                    "golden data missing: run tests/golden/make_clip_golden.py");
    const ClipConfig cfg = ClipConfig::tiny();
    io::SafetensorsFile io(dir / "clip_tiny_io.safetensors");
    const std::vector<int32_t> ids = read_all<int32_t>(io, "ids", DType::i32);
    const std::vector<int32_t> long_ids = read_all<int32_t>(io, "long_ids", DType::i32);
    double worst_out = 0, worst_grad = 0;
    for (const char* file : {"clip_tiny.safetensors", "clip_tiny_original.safetensors"}) {
        CAPTURE(file);
        io::SafetensorsFile weights(dir / file);
        for (int skip : {1, 2}) {
            CAPTURE(skip);
            const std::string tag = skip == 1 ? "last" : "skip2";
            const std::vector<float> want_out = read_all<float>(io, "out_" + tag, DType::f32);
            const double e_ids = rel_err(encode(cfg, weights, ids, 2, skip).out, want_out);
            auto [out, grad] = encode_with_grad(cfg, weights, io, skip);
            const double e_emb = rel_err(out, want_out);
            const double e_grad = rel_err(grad, read_all<float>(io, "grad_" + tag, DType::f32));
            CHECK(e_ids <= 1e-4);
            CHECK(e_emb <= 1e-4);
            CHECK(e_grad <= 1e-4);
            worst_out = std::max({worst_out, e_ids, e_emb});
            worst_grad = std::max(worst_grad, e_grad);
        }
        Encoded joined = encode(cfg, weights, long_ids, 3, 2, 3);
        CHECK(joined.shape == Shape::of(io.info("out_long_skip2").shape));
        const double e_long = rel_err(joined.out, read_all<float>(io, "out_long_skip2", DType::f32));
        CHECK(e_long <= 1e-4);
        worst_out = std::max(worst_out, e_long);
    }
    MESSAGE("clip golden: max relative error, outputs ", worst_out, ", input gradients ", worst_grad);
}

TEST_CASE("clip golden: bf16 weights and activations stay within bf16 tolerance") {
    const std::filesystem::path dir = clip_golden_dir();
    REQUIRE(std::filesystem::exists(dir / "clip_tiny_io.safetensors"));
    io::SafetensorsFile io(dir / "clip_tiny_io.safetensors"), weights(dir / "clip_tiny_original.safetensors");
    const std::vector<int32_t> ids = read_all<int32_t>(io, "ids", DType::i32);
    Graph g;
    nn::Weights w(g, DType::bf16);
    ValueId in = g.input("ids", DType::i32, {2, 77});
    ValueId out = build_clip(w, g, in, ClipConfig::tiny(), 2);
    CHECK(g.dtype(out) == DType::bf16);
    g.mark_output(out);
    auto rt = make_cpu_runtime(make_plan(g));
    rt->poison(0xff);
    load_clip(w, weights, *rt);
    rt->write(in, ids.data(), DType::i32);
    rt->run();
    const double e = rel_err(rt->read_f32(out), read_all<float>(io, "out_skip2", DType::f32));
    MESSAGE("clip bf16: max relative error ", e);
    CHECK(e <= 3e-2);
}
