// The graphs the SD1.5 models build, pinned node for node. Plan reports name values, recompute
// works on the checkpoint segments, and LoRA modules and their parameters are named by the
// module paths the builders open, so a refactor of the builders (models/nn/, models/sd15/)
// must leave every graph exactly as it was. Each graph is reduced to a digest of what those
// depend on: every value (name, role, dtype, shape), every node (op, inputs, outputs,
// parameters, segment) in order, and the segment names.
//
// The expected digests were computed before the shared layer set (models/nn/) existed, from
// the per-model builders it replaced. A change that means to alter a graph (a new op in a
// block, a renamed scope) updates the digest here and says so in its commit; a digest that
// changes otherwise is a regression.
#include <doctest/doctest.h>

#include <bit>
#include <cstdio>
#include <cstring>

#include "ggml-lite/core/graph.h"
#include "lora/lora.h"
#include "models/sd15/clip.h"
#include "models/sd15/unet.h"
#include "models/sd15/vae.h"

using namespace gl;

namespace {

// FNV-1a over a canonical byte stream of the graph.
class Digest {
public:
    void bytes(const void* p, size_t n) {
        const auto* b = static_cast<const unsigned char*>(p);
        for (size_t i = 0; i < n; i++) h_ = (h_ ^ b[i]) * 0x100000001b3ull;
    }
    void str(const std::string& s) {
        u64(s.size());
        bytes(s.data(), s.size());
    }
    void u64(uint64_t v) { bytes(&v, sizeof v); }
    void i64(int64_t v) { bytes(&v, sizeof v); }
    void f32(float v) {
        const uint32_t u = std::bit_cast<uint32_t>(v);
        bytes(&u, sizeof u);
    }
    uint64_t value() const { return h_; }

private:
    uint64_t h_ = 0xcbf29ce484222325ull;
};

// Ops by name, not by enum value: adding an op elsewhere in the op list must not move a digest.
uint64_t graph_digest(const Graph& g) {
    Digest d;
    d.u64(g.values.size());
    for (const Value& v : g.values) {
        d.str(v.name);
        d.u64(uint64_t(v.role));
        d.str(dtype_name(v.dtype));
        d.u64(uint64_t(v.shape().nd));
        for (int i = 0; i < v.shape().nd; i++) d.i64(v.shape()[i]);
        d.i64(v.base);
        d.u64(v.output);
    }
    d.u64(g.nodes.size());
    for (const Node& n : g.nodes) {
        d.str(op_name(n.op));
        d.u64(n.in.size());
        for (ValueId x : n.in) d.i64(x);
        d.u64(n.out.size());
        for (ValueId x : n.out) d.i64(x);
        for (int64_t x : n.p.i) d.i64(x);
        for (float x : n.p.f) d.f32(x);
        d.i64(n.segment);
    }
    d.u64(g.segment_names.size());
    for (const std::string& s : g.segment_names) d.str(s);
    return d.value();
}

void check_digest(const char* what, const Graph& g, uint64_t expected) {
    const uint64_t got = graph_digest(g);
    char hex[32];
    std::snprintf(hex, sizeof hex, "0x%016llx", static_cast<unsigned long long>(got));
    INFO(std::string(what), ": ", g.values.size(), " values, ", g.nodes.size(), " nodes, ", g.segment_names.size(),
         " segments, digest ", hex);
    CHECK(got == expected);
}

ValueId unet(Graph& g, nn::Weights& w, const sd::UnetConfig& c, int64_t B, int64_t side, int64_t S) {
    ValueId x = g.input("x", DType::f32, {B, side, side, c.in_channels});
    ValueId t = g.input("t", DType::f32, {B});
    ValueId ctx = g.input("context", DType::f32, {B, S, c.cross_attention_dim});
    return sd::unet_forward(w, c, x, t, ctx);
}

}  // namespace

TEST_CASE("model graphs: the digest sees names, segments, order and parameters") {
    Graph g;
    nn::Weights w(g, DType::f32);
    unet(g, w, sd::UnetConfig::tiny(), 1, 8, 3);
    const uint64_t base = graph_digest(g);
    auto changed = [&](auto edit) {
        Graph h = g;
        edit(h);
        return graph_digest(h) != base;
    };
    CHECK(changed([](Graph& h) { h.values[40].name += "x"; }));
    CHECK(changed([](Graph& h) { h.segment_names[1] += "x"; }));
    CHECK(changed([](Graph& h) { h.nodes[30].segment = -1; }));
    CHECK(changed([](Graph& h) { std::swap(h.nodes[10], h.nodes[11]); }));
    CHECK(changed([](Graph& h) { h.nodes[5].p.i[0] += 1; }));
    CHECK(changed([](Graph& h) { h.values[3].dtype = DType::bf16; }));
}

TEST_CASE("model graphs: the tiny and the SD1.5 UNet") {
    {
        Graph g;
        nn::Weights w(g, DType::f32);
        unet(g, w, sd::UnetConfig::tiny(), 2, 8, 5);
        check_digest("tiny UNet", g, 0x26502b1684795f7cull);
    }
    {
        Graph g;
        nn::Weights w(g, DType::bf16);
        unet(g, w, sd::UnetConfig::sd15(), 1, 64, 77);
        check_digest("SD1.5 UNet", g, 0xbc443dbd2dcb40e0ull);
    }
}

TEST_CASE("model graphs: the tiny UNet with LoRA and LoCon hooks") {
    Graph g;
    nn::Weights w(g, DType::f32);
    lora::LoraConfig lc{4, 2.0f, 1.0f};
    lc.conv_dim = 2;
    lc.rank_dropout = 0.1f;
    lc.dropout = 0.1f;
    lora::LoraNetwork net(lc);
    net.attach_unet(w);
    unet(g, w, sd::UnetConfig::tiny(), 2, 8, 5);
    check_digest("tiny UNet + LoRA/LoCon", g, 0x0d1eb0fd16de4a04ull);
}

TEST_CASE("model graphs: the tiny and the SD1.5 VAE, encoder and decoder") {
    for (const bool full : {false, true}) {
        const sd::VaeConfig c = full ? sd::VaeConfig::sd15() : sd::VaeConfig::tiny();
        const int64_t side = full ? 256 : 8;
        Graph g;
        nn::Weights w(g, full ? DType::bf16 : DType::f32);
        ValueId img = g.input("image", DType::f32, {2, side, side, c.in_channels});
        sd::VaeEncoded e = sd::vae_encode(w, c, img);
        sd::vae_decode(w, c, e.latent);
        // The SD1.5 VAE's mid-block attention (512 wide) takes the unfused path, the tiny one's the fused.
        check_digest(full ? "SD1.5 VAE" : "tiny VAE", g, full ? 0x9985bc280ad1f0d3ull : 0x4624ffe43611b13eull);
    }
}

TEST_CASE("model graphs: the tiny and the SD1.5 CLIP text encoder, with LoRA and clip_skip") {
    {
        Graph g;
        nn::Weights w(g, DType::f32);
        const sd::ClipConfig c = sd::ClipConfig::tiny();
        ValueId ids = g.input("ids", DType::i32, {2, 7});
        sd::build_clip(w, g, ids, c);
        ValueId embeds = g.input("embeds", DType::f32, {2, 7, c.width});
        sd::build_clip_from_embeds(w, g, embeds, c);
        check_digest("tiny CLIP", g, 0x3ffef44b2e12d154ull);
    }
    {
        Graph g;
        nn::Weights w(g, DType::bf16);
        lora::LoraConfig lc{8, 4.0f, 1.0f};
        lc.module_dropout = 0.1f;
        lora::LoraNetwork net(lc);
        net.attach_text_encoder(w);
        ValueId ids = g.input("ids", DType::i32, {4, 77});
        sd::build_clip_chunked(w, g, ids, 2, sd::ClipConfig::vit_l14(), 2);
        check_digest("SD1.5 CLIP + LoRA, clip_skip 2, 2 chunks", g, 0x7a29cb07e17f26c3ull);
    }
}
