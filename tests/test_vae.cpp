// The SD1.5 VAE graphs: the full-size weight names and shapes against diffusers' list, every
// checkpoint layout (single file, standalone original file, diffusers with old and new attention
// names) loading the same tiny model, its outputs and input gradients against diffusers
// (tests/golden/data/vae/, made by make_vae_golden.py), partial loads from a pipeline file,
// recompute, and bad configs and inputs.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "ggml-lite/core/autodiff.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/io/safetensors.h"
#include "ggml-lite/io/sources.h"
#include "ggml-lite/ops/builder.h"
#include "models/sd15/vae.h"
#include "test_util.h"

using namespace gl;
using gltest::read_f32;
using gltest::rel_error;
using sd::VaeConfig;

namespace {

std::string data_dir() { return gltest::golden_dir("vae"); }

// The tiny VAE's encoder and decoder in one graph: x and z are parameters so autodiff gives
// their gradients; loss = sum(moments * r_enc) + sum(image * r_dec).
struct TinyVae {
    Graph g;
    sd::Weights w{g, DType::f32};
    VaeConfig c = VaeConfig::tiny();
    ValueId x, z, r_enc, r_dec, image, loss;
    sd::VaeEncoded enc;
    Gradients grads;

    TinyVae(int64_t B, int64_t H, int64_t W, int max_fused_attention_width = 256) {
        c.max_fused_attention_width = max_fused_attention_width;
        const int64_t h = H / c.downscale(), wd = W / c.downscale();
        x = g.param("x", DType::f32, {B, H, W, c.in_channels});
        z = g.param("z", DType::f32, {B, h, wd, c.latent_channels});
        enc = sd::vae_encode(w, c, x);
        image = sd::vae_decode(w, c, z);
        r_enc = g.input("r_enc", DType::f32, {B, h, wd, 2 * c.latent_channels});
        r_dec = g.input("r_dec", DType::f32, {B, H, W, c.out_channels});
        for (ValueId v : {enc.moments, enc.latent, image}) g.mark_output(v);
        loss = add(g, sum(g, mul(g, enc.moments, r_enc)), sum(g, mul(g, image, r_dec)));
        g.mark_output(loss);
        grads = backward(g, loss);
    }
};

// Another source's tensors under other names (legacy diffusers names, a standalone VAE file).
class Renamed : public io::TensorSource {
public:
    Renamed(const io::TensorSource& s, const std::function<std::string(const std::string&)>& rename) : s_(s) {
        for (const io::TensorInfo& t : s.list()) to_inner_[rename(t.name)] = t.name;
    }
    std::string origin() const override { return "renamed(" + s_.origin() + ")"; }
    std::vector<io::TensorInfo> list() const override {
        std::vector<io::TensorInfo> out;
        for (auto& [name, inner] : to_inner_) out.push_back(info(name));
        return out;
    }
    bool has(const std::string& n) const override { return to_inner_.count(n) != 0; }
    io::TensorInfo info(const std::string& n) const override {
        io::TensorInfo t = s_.info(inner(n));
        t.name = n;
        return t;
    }
    void read(const std::string& n, void* dst, DType to) const override { s_.read(inner(n), dst, to); }

private:
    std::string inner(const std::string& n) const {
        auto it = to_inner_.find(n);
        if (it == to_inner_.end()) fail(origin(), ": no tensor ", n);
        return it->second;
    }
    const io::TensorSource& s_;
    std::map<std::string, std::string> to_inner_;
};

// diffusers' attention names before its rename.
std::string legacy_name(std::string n) {
    for (auto [a, b] : {std::pair{".to_q.", ".query."}, {".to_k.", ".key."}, {".to_v.", ".value."},
                        {".to_out.0.", ".proj_attn."}}) {
        size_t at = n.find(a);
        if (at != std::string::npos) n = n.substr(0, at) + b + n.substr(at + std::string(a).size());
    }
    return n;
}

struct Results {
    std::vector<float> moments, latent, image, grad_x, grad_z;
};

// Loads with load_vae (layout detected), runs forward and backward once.
// fused_width: the config's max_fused_attention_width (0: attention as matmul, softmax, matmul).
Results run_tiny(const io::TensorSource& weights, const io::TensorSource& io, Recompute rc = Recompute::none,
                 int fused_width = 256) {
    const io::TensorInfo xi = io.info("x");
    TinyVae net(xi.shape[0], xi.shape[1], xi.shape[2], fused_width);
    PlanOptions o;
    o.recompute = rc;
    auto rt = make_cpu_runtime(make_plan(net.g, o));
    rt->poison(0xff);
    sd::LoadReport rep = sd::load_vae(net.w, net.c, weights, *rt);
    CHECK(rep.missing.empty());
    CHECK(rep.unexpected.empty());
    CHECK(rep.tensors == net.w.entries().size());
    for (auto [v, name] : {std::pair{net.x, "x"}, {net.z, "z"}, {net.r_enc, "r_enc"}, {net.r_dec, "r_dec"}})
        rt->write_f32(v, read_f32(io, name));
    rt->run();
    return {rt->read_f32(net.enc.moments), rt->read_f32(net.enc.latent), rt->read_f32(net.image),
            rt->read_f32(net.grads[net.x]), rt->read_f32(net.grads[net.z])};
}

void check_golden(const Results& r, const io::TensorSource& io, const VaeConfig& c) {
    const std::vector<float> moments = read_f32(io, "moments");
    const double e_moments = rel_error(r.moments, moments);
    const double e_image = rel_error(r.image, read_f32(io, "image"));
    const double e_gx = rel_error(r.grad_x, read_f32(io, "grad_x"));
    const double e_gz = rel_error(r.grad_z, read_f32(io, "grad_z"));
    // The mode latent is scaling_factor * mean, the sample adds std * the given noise.
    std::vector<float> mode;
    const size_t L = size_t(c.latent_channels);
    for (size_t i = 0; i < moments.size(); i++)
        if (i % (2 * L) < L) mode.push_back(c.scaling_factor * moments[i]);
    const double e_latent = rel_error(r.latent, mode);
    const double e_sample = rel_error(sd::vae_sample_latent(c, r.moments, read_f32(io, "noise")), read_f32(io, "sample"));
    MESSAGE("rel. errors vs diffusers: moments ", e_moments, ", latent ", e_latent, ", sample ", e_sample, ", image ",
            e_image, ", d/dx ", e_gx, ", d/dz ", e_gz);
    CHECK(e_moments <= 1e-4);
    CHECK(e_latent <= 1e-4);
    CHECK(e_sample <= 1e-4);
    CHECK(e_image <= 1e-4);
    CHECK(e_gx <= 1e-4);
    CHECK(e_gz <= 1e-4);
}

}  // namespace

TEST_CASE("vae: the SD1.5 config has diffusers' weight names and shapes, and the original keys") {
    std::ifstream f(data_dir() + "sd15_keys.txt");
    REQUIRE_MESSAGE(f.good(), "missing ", data_dir(), "sd15_keys.txt (run tests/golden/make_vae_golden.py)");
    struct Ref {
        std::string original;
        std::vector<int64_t> shape;
    };
    std::map<std::string, Ref> ref;
    for (std::string line; std::getline(f, line);) {
        if (line.empty() || line[0] == '#') continue;
        std::istringstream ls(line);
        std::string key, orig, dims;
        ls >> key >> orig >> dims;
        Ref r{orig, {}};
        std::istringstream ds(dims);
        for (std::string d; std::getline(ds, d, ',');) r.shape.push_back(std::stoll(d));
        ref[key] = r;
    }
    REQUIRE(ref.size() > 200);

    Graph g;
    sd::Weights w(g, DType::bf16);
    const VaeConfig c = VaeConfig::sd15();
    ValueId x = g.input("x", DType::bf16, {1, 64, 64, 3});
    ValueId z = g.input("z", DType::bf16, {1, 8, 8, 4});
    sd::VaeEncoded e = sd::vae_encode(w, c, x);
    ValueId img = sd::vae_decode(w, c, z);
    CHECK(g.shape(e.moments) == Shape{1, 8, 8, 8});
    CHECK(g.shape(e.latent) == Shape{1, 8, 8, 4});
    CHECK(g.shape(img) == Shape{1, 64, 64, 3});

    const sd::VaeKeyFn original = sd::vae_keys_original(c);
    std::set<std::string> seen, original_seen;
    int64_t params = 0;
    for (const sd::WeightEntry& we : w.entries()) {
        auto it = ref.find(we.name);
        REQUIRE_MESSAGE(it != ref.end(), we.name, " is not a diffusers key");
        const Shape s = g.shape(we.id);
        std::vector<int64_t> torch_shape = s.vec();
        if (we.layout == sd::WeightLayout::conv_ohwi) torch_shape = {s[0], s[3], s[1], s[2]};
        CHECK_MESSAGE(torch_shape == it->second.shape, we.name);
        CHECK_MESSAGE(original(we.name) == it->second.original, we.name);
        original_seen.insert(original(we.name));
        seen.insert(we.name);
        params += s.numel();
    }
    CHECK(seen.size() == ref.size());
    CHECK(original_seen.size() == ref.size());
    CHECK(params == 83653863);  // diffusers' AutoencoderKL for SD1.5

    // One ResNet or attention block per segment, named after its module.
    std::set<std::string> segs(g.segment_names.begin(), g.segment_names.end());
    CHECK(segs.count("encoder.down_blocks.0.resnets.1"));
    CHECK(segs.count("encoder.mid_block.attentions.0"));
    CHECK(segs.count("decoder.up_blocks.3.resnets.2"));
    CHECK(g.segment_names.size() == size_t(4 * 2 + 3 + 3 + 4 * 3));
}

TEST_CASE("vae: the original key map names nothing it does not know") {
    const sd::VaeKeyFn k = sd::vae_keys_original(VaeConfig::tiny());
    CHECK(k("decoder.up_blocks.0.upsamplers.0.conv.weight") == "first_stage_model.decoder.up.1.upsample.conv.weight");
    CHECK(k("decoder.up_blocks.1.resnets.2.conv_shortcut.bias") ==
          "first_stage_model.decoder.up.0.block.2.nin_shortcut.bias");
    CHECK(k("encoder.mid_block.attentions.0.to_out.0.weight") == "first_stage_model.encoder.mid.attn_1.proj_out.weight");
    CHECK(k("post_quant_conv.bias") == "first_stage_model.post_quant_conv.bias");
    for (const char* bad : {"decoder.up_blocks.2.resnets.0.conv1.weight", "encoder.mid_block.attentions.1.to_q.weight",
                            "encoder.mid_block.resnets.2.conv1.weight", "encoder.down_blocks.x.resnets.0.conv1.weight",
                            "encoder", "", "unet.conv_in.weight", "encoder.mid_block.attentions.0.to_x.weight"})
        CHECK_MESSAGE(k(bad) == "", bad);
}

TEST_CASE("vae: tiny encoder and decoder match diffusers in both checkpoint layouts") {
    io::SafetensorsFile io(data_dir() + "io.safetensors");
    io::SafetensorsFile diffusers(data_dir() + "weights_diffusers.safetensors");
    io::SafetensorsFile original(data_dir() + "weights_original.safetensors");
    const VaeConfig c = VaeConfig::tiny();
    CHECK(sd::detect_vae_layout(diffusers).layout == sd::VaeLayout::diffusers);
    CHECK(sd::detect_vae_layout(original).layout == sd::VaeLayout::original);
    CHECK(sd::detect_vae_layout(original).prefix == sd::kVaeOriginalPrefix);
    Results a = run_tiny(diffusers, io);
    check_golden(a, io, c);
    // The same numbers from the same tensors, whatever their names: the original single-file
    // layout, a standalone original VAE file (no prefix), diffusers' legacy attention names.
    Renamed standalone(original, [](const std::string& n) { return n.substr(std::string(sd::kVaeOriginalPrefix).size()); });
    Renamed legacy(diffusers, legacy_name);
    REQUIRE(legacy.has("encoder.mid_block.attentions.0.query.weight"));
    CHECK(sd::detect_vae_layout(standalone).prefix == "");
    for (const io::TensorSource* src : std::vector<const io::TensorSource*>{&original, &standalone, &legacy}) {
        CAPTURE(src->origin());
        Results b = run_tiny(*src, io);
        CHECK(a.moments == b.moments);
        CHECK(a.image == b.image);
        CHECK(a.grad_x == b.grad_x);
        CHECK(a.grad_z == b.grad_z);
    }
}

TEST_CASE("vae: attention wider than the fused kernels (matmul, softmax, matmul) matches diffusers too") {
    io::SafetensorsFile io(data_dir() + "io.safetensors");
    io::SafetensorsFile diffusers(data_dir() + "weights_diffusers.safetensors");
    check_golden(run_tiny(diffusers, io, Recompute::none, 0), io, VaeConfig::tiny());
}

TEST_CASE("vae: bf16 weights and activations stay near diffusers' f64 numbers") {
    io::SafetensorsFile io(data_dir() + "io.safetensors");
    io::SafetensorsFile diffusers(data_dir() + "weights_diffusers.safetensors");
    const VaeConfig c = VaeConfig::tiny();
    const Shape xs = Shape::of(io.info("x").shape), zs = Shape::of(io.info("z").shape);
    Graph g;
    sd::Weights w(g, DType::bf16);
    ValueId x = g.input("x", DType::f32, xs), z = g.input("z", DType::f32, zs);
    ValueId moments = sd::vae_encode(w, c, x).moments, image = sd::vae_decode(w, c, z);
    g.mark_output(moments);
    g.mark_output(image);
    auto rt = make_cpu_runtime(make_plan(g));
    sd::load_vae(w, c, diffusers, *rt);
    rt->write_f32(x, read_f32(io, "x"));
    rt->write_f32(z, read_f32(io, "z"));
    rt->run();
    const double e_moments = rel_error(rt->read_f32(moments), read_f32(io, "moments"));
    const double e_image = rel_error(rt->read_f32(image), read_f32(io, "image"));
    MESSAGE("bf16 rel. errors vs diffusers: moments ", e_moments, ", image ", e_image);
    CHECK(e_moments <= 3e-2);
    CHECK(e_image <= 3e-2);
}

TEST_CASE("vae: loading from a whole pipeline file takes only what the graph uses") {
    // A single file: the VAE under first_stage_model. beside other models' tensors.
    io::MergedSource single("single file");
    single.add("", std::make_unique<io::SafetensorsFile>(data_dir() + "weights_original.safetensors"));
    single.add("model.diffusion_model.", std::make_unique<io::SafetensorsFile>(data_dir() + "io.safetensors"));
    single.add("first_stage_model.decoder.stray.", std::make_unique<io::SafetensorsFile>(data_dir() + "io.safetensors"));
    const VaeConfig c = VaeConfig::tiny();
    Graph g;
    sd::Weights w(g, DType::f32);
    ValueId img = sd::vae_decode(w, c, g.input("z", DType::f32, {1, 4, 4, 4}));
    g.mark_output(img);
    auto rt = make_cpu_runtime(make_plan(g));
    sd::LoadReport r = sd::load_vae(w, c, single, *rt);
    CHECK(r.missing.empty());
    CHECK(r.tensors == w.entries().size());
    // The encoder's tensors and the UNet's are someone else's; a stray decoder key is reported.
    REQUIRE(r.unexpected.size() == io::SafetensorsFile(data_dir() + "io.safetensors").list().size());
    for (const std::string& u : r.unexpected) CHECK(u.rfind("first_stage_model.decoder.stray.", 0) == 0);

    io::SafetensorsFile not_vae(data_dir() + "io.safetensors");
    CHECK_THROWS_WITH_AS(sd::detect_vae_layout(not_vae), doctest::Contains("no VAE found"), Error);
}

TEST_CASE("vae: recomputing every block gives identical outputs and gradients") {
    io::SafetensorsFile io(data_dir() + "io.safetensors");
    io::SafetensorsFile diffusers(data_dir() + "weights_diffusers.safetensors");
    Results a = run_tiny(diffusers, io), b = run_tiny(diffusers, io, Recompute::blocks);
    CHECK(a.moments == b.moments);
    CHECK(a.image == b.image);
    CHECK(a.grad_x == b.grad_x);
    CHECK(a.grad_z == b.grad_z);
    TinyVae net(2, 16, 24);
    PlanOptions o;
    o.recompute = Recompute::blocks;
    CHECK(make_plan(net.g, o).recompute_nodes > 0);
}

TEST_CASE("vae: bad configs and inputs are refused with the reason") {
    auto encode_err = [](VaeConfig c, Shape s) {
        Graph g;
        sd::Weights w(g, DType::f32);
        try {
            sd::vae_encode(w, c, g.input("x", DType::f32, s));
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    const VaeConfig tiny = VaeConfig::tiny();
    CHECK(encode_err(tiny, {1, 16, 16, 3}).empty());
    CHECK(encode_err(tiny, {1, 16, 16, 4}).find("[B, H, W, 3]") != std::string::npos);
    CHECK(encode_err(tiny, {1, 15, 16, 3}).find("multiples of 2") != std::string::npos);
    CHECK(encode_err(tiny, {16, 16, 3}).find("NHWC") != std::string::npos);
    VaeConfig c = tiny;
    c.norm_groups = 3;
    CHECK(encode_err(c, {1, 16, 16, 3}).find("divisible by norm_groups") != std::string::npos);
    c = tiny;
    c.block_out.clear();
    CHECK(encode_err(c, {1, 16, 16, 3}).find("blocks") != std::string::npos);
    c = tiny;
    c.scaling_factor = 0;
    CHECK(encode_err(c, {1, 16, 16, 3}).find("scaling_factor") != std::string::npos);

    Graph g;
    sd::Weights w(g, DType::f32);
    CHECK_THROWS_WITH_AS(sd::vae_decode(w, tiny, g.input("z", DType::f32, {1, 4, 4, 8})),
                         doctest::Contains("decoder input"), Error);
    // Any float input is cast to the weights' dtype.
    CHECK(g.dtype(sd::vae_decode(w, tiny, g.input("z16", DType::bf16, {1, 4, 4, 4}))) == DType::f32);
    CHECK_THROWS_WITH_AS(sd::vae_decode(w, tiny, g.input("zi", DType::i32, {1, 4, 4, 4})),
                         doctest::Contains("floating point"), Error);
    CHECK_THROWS_AS(sd::vae_sample_latent(tiny, std::vector<float>(16), std::vector<float>(4)), Error);
}
