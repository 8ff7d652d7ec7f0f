// Integer overflow in sizes: shapes, graph values, the planner's arenas, tensor byte counts in the
// readers and writers, and the model configs. Every overflow is an error naming its culprit (the
// value, op, tensor, config key), never a wrapped size that a later allocation trusts.
#include <doctest/doctest.h>

#include <cstdint>

#include "ggml-lite/core/checked.h"
#include "ggml-lite/core/planner.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/io/convert.h"
#include "ggml-lite/io/safetensors.h"
#include "ggml-lite/ops/builder.h"
#include "models/sd15/model_files.h"
#include "test_util.h"
#include "train/step.h"

using namespace gl;
using gltest::error_of;

namespace {

constexpr int64_t k2_31 = int64_t(1) << 31, k2_32 = int64_t(1) << 32;

void expect(const std::function<void()>& f, const std::vector<std::string>& parts) {
    const std::string e = error_of(f);
    for (const std::string& p : parts) CHECK_MESSAGE(e.find(p) != std::string::npos, "want '", p, "' in: ", e);
}

}  // namespace

TEST_CASE("sizes: the checked helpers name what overflowed") {
    CHECK(checked_mul(k2_31, k2_31, "x") == int64_t(1) << 62);
    expect([] { checked_mul(k2_32, k2_32, "tensor 'w'"); }, {"tensor 'w': 4294967296 x 4294967296 overflows 64 bits"});
    expect([] { checked_add(INT64_MAX, 1, "offset"); }, {"offset: 9223372036854775807 + 1 overflows"});
    const int64_t dims[] = {k2_32, k2_32, 2};
    expect([&] { checked_numel(dims, 3, "t"); }, {"t: shape [4294967296, 4294967296, 2] has more than 2^63 elements"});
    const int64_t negative[] = {2, -3};
    expect([&] { checked_numel(negative, 2, "t"); }, {"shape [2, -3] has a negative dimension"});
    CHECK(checked_bytes(int64_t(1) << 60, 4, "t") == int64_t(1) << 62);
    expect([] { checked_bytes(int64_t(1) << 61, 4, "tensor 'w'"); },
           {"tensor 'w': 2305843009213693952 elements of 4 bytes exceed 2^63 bytes"});
}

TEST_CASE("sizes: shapes and layouts refuse element counts beyond int64") {
    const Shape s{k2_32, k2_32};
    expect([&] { (void)s.numel(); }, {"shape [4294967296, 4294967296] has more than 2^63 elements"});
    expect([&] { Layout::contiguous(s); }, {"has more than 2^63 elements"});
    CHECK(Shape{k2_31, k2_31}.numel() == int64_t(1) << 62);
    Layout l = Layout::contiguous(Shape{4, 4});
    l.stride = {INT64_MAX / 2, 1, 0, 0};
    expect([&] { (void)l.span(); }, {"the span of its strides overflows"});
}

TEST_CASE("sizes: graph values whose bytes overflow are refused where they are made, naming the leaf or op") {
    Graph g;
    expect([&] { g.input("latents", DType::f32, {k2_31, k2_31 / 2}); }, {"graph: leaf 'latents'", "exceed 2^63 bytes"});
    expect([&] { g.weight("w", DType::f16, {k2_32, k2_32}); }, {"graph: leaf 'w'", "more than 2^63 elements"});
    // Broadcasting [2^31, 1] with [1, 2^31] makes 2^62 f32 elements: 2^64 bytes.
    const ValueId a = g.input("a", DType::f32, {k2_31, 1}), b = g.input("b", DType::f32, {1, k2_31});
    expect([&] { add(g, a, b); }, {"graph: add output", "exceed 2^63 bytes"});
}

TEST_CASE("sizes: the planner refuses arenas beyond 2^63 bytes, naming the category") {
    {
        Graph g;  // four 2^61-byte weights: the frozen arena would need 2^63 bytes
        for (int i = 0; i < 4; i++) g.weight("w" + std::to_string(i), DType::f32, {int64_t(1) << 59});
        expect([&] { make_plan(g); }, {"plan: the frozen weights arena would exceed 2^63 bytes"});
    }
    {
        Graph g;  // the same in the activations arena, through the best-fit allocator
        ValueId x = g.input("x", DType::f32, {int64_t(1) << 59});
        for (int i = 0; i < 4; i++) g.mark_output(x = gl::silu(g, x));
        expect([&] { make_plan(g); }, {"plan: the activations arena would exceed 2^63 bytes"});
    }
}

// Under AddressSanitizer a failed operator new aborts instead of throwing std::bad_alloc.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif

TEST_CASE("sizes: an arena the host cannot allocate is an error naming the category and the bytes" *
          doctest::skip(kAsan)) {
    Graph g;
    const ValueId x = g.input("x", DType::f32, {int64_t(1) << 54});  // 64 PiB
    g.mark_output(gl::silu(g, x));
    expect([&] { make_cpu_runtime(make_plan(g)); }, {"cpu runtime: cannot allocate", "activations arena"});
}

TEST_CASE("sizes: readers and the writer refuse byte counts beyond int64, naming file and tensor") {
    io::TensorInfo t{"huge", DType::f32, {k2_31, k2_31}};
    CHECK(t.numel() == int64_t(1) << 62);
    expect([&] { (void)t.nbytes(); }, {"tensor 'huge'", "exceed 2^63 bytes"});
    io::TensorInfo t2{"t2", DType::f32, {k2_32, k2_32}};
    expect([&] { (void)t2.numel(); }, {"tensor 't2'", "more than 2^63 elements"});

    // A strided gather over a view whose element count overflows.
    const float one = 1.0f;
    float out = 0.0f;
    const int64_t sizes[] = {k2_32, k2_32}, strides[] = {0, 0};
    expect([&] { io::gather_elements(&one, io::StoredType::f32, 0, sizes, strides, 2, &out, DType::f32, "x.ckpt: tensor 'v'"); },
           {"x.ckpt: tensor 'v': shape [4294967296, 4294967296] has more than 2^63 elements"});

    // safetensors header shapes: overflow of the element count, and of the byte count.
    auto header = [](const std::string& shape) {
        const std::string h = R"({"t": {"dtype": "F64", "shape": )" + shape + R"(, "data_offsets": [0, 8]}})";
        std::string b(8, '\0');
        for (int i = 0; i < 8; i++) b[size_t(i)] = char(uint64_t(h.size()) >> (8 * i));
        b += h + std::string(8, '\0');
        return std::vector<uint8_t>(b.begin(), b.end());
    };
    expect([&] { io::SafetensorsFile f(header("[4294967296, 4294967296]"), "big.safetensors"); },
           {"big.safetensors: tensor 't'", "overflows"});
    expect([&] { io::SafetensorsFile f(header("[2147483648, 2147483648]"), "big.safetensors"); },
           {"big.safetensors: tensor 't'", "needs"});
    expect([&] { io::write_safetensors("/nonexistent/x.safetensors", {{"w", DType::f32, {k2_31, k2_31}, &one}}); },
           {"tensor 'w'", "exceed 2^63 bytes"});
}

TEST_CASE("sizes: config integers are range-checked and refused with their key") {
    const std::string unet = R"({"_class_name": "UNet2DConditionModel", "block_out_channels": [1073741824, 1073741824],
        "down_block_types": ["CrossAttnDownBlock2D", "DownBlock2D"], "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D"],
        "norm_num_groups": 32, "attention_head_dim": 8})";
    expect([&] { sd::parse_unet_config(unet, "unet/config.json"); },
           {"unet/config.json", "block_out_channels[0] = 1073741824 is out of range"});
    const std::string layers = R"({"_class_name": "UNet2DConditionModel", "layers_per_block": 100000})";
    expect([&] { sd::parse_unet_config(layers, "u.json"); }, {"u.json", "layers_per_block = 100000 is out of range"});
    const std::string cross = R"({"_class_name": "UNet2DConditionModel", "cross_attention_dim": 1073741824})";
    expect([&] { sd::parse_unet_config(cross, "u.json"); }, {"cross_attention_dim = 1073741824 is out of range"});
    const std::string vae = R"({"_class_name": "AutoencoderKL", "latent_channels": 1000000})";
    expect([&] { sd::parse_vae_config(vae, "vae/config.json"); },
           {"vae/config.json", "latent_channels = 1000000 is out of range"});
    const std::string clip = R"({"model_type": "clip_text_model", "hidden_size": 1073741824, "num_attention_heads": 8})";
    expect([&] { sd::parse_clip_config(clip, "text_encoder/config.json"); },
           {"text_encoder/config.json", "field 'hidden_size' = 1073741824 is out of range"});
    const std::string vocab = R"({"model_type": "clip_text_model", "vocab_size": 1073741824})";
    expect([&] { sd::parse_clip_config(vocab, "t.json"); }, {"field 'vocab_size' = 1073741824 is out of range"});
    // Image sizes and batch of a training step, by field.
    train::StepOptions so;
    so.latent_h = int64_t(1) << 40;
    expect([&] { so.validate(); }, {"step: latent_h (image height / 8) = 1099511627776 is out of range"});
    so.latent_h = 64;
    so.batch = int64_t(1) << 40;
    expect([&] { so.validate(); }, {"step: batch = 1099511627776 is out of range"});
    // Configs built in code go through the same validation.
    sd::UnetConfig c = sd::UnetConfig::tiny();
    c.block_out = {1 << 30, 1 << 30};
    expect([&] { c.validate(); }, {"block_out_channels[0] = 1073741824 is out of range (1..65536)"});
}
