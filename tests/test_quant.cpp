// 8-bit frozen weights (core/quant.h, ops/quant.h, nn::Weights with a WeightFormat): f8e4m3
// conversions as PyTorch's, per-row quantization round trips and refusals, the weight store and
// its loader, and the quantized UNet against the dense UNet on the dequantized weights. The ops'
// gradients (to activations only) are checked by the op cases (cases_matmul.cpp, cases_conv.cpp).
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>

#include "ggml-lite/core/autodiff.h"
#include "ggml-lite/core/planner.h"
#include "ggml-lite/core/quant.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/io/safetensors.h"
#include "models/sd15/unet.h"
#include "test_util.h"

using namespace gl;
using gltest::error_of;
using gltest::golden_dir;
using gltest::read_f32;
using gltest::rel_error;

namespace {

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }

// Rows of different magnitudes (1e-30 .. 1e3, one negative-dominated), random values in each.
std::vector<float> varied_rows(int64_t rows, int64_t cols, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> z(0.0f, 1.0f);
    std::vector<float> w(size_t(rows * cols));
    for (int64_t r = 0; r < rows; r++) {
        const float mag = std::pow(10.0f, float(r % 34) - 30.0f);
        for (int64_t j = 0; j < cols; j++) w[size_t(r * cols + j)] = mag * z(rng);
    }
    return w;
}

std::vector<float> decoded(const std::vector<uint8_t>& q, DType t) {
    std::vector<float> v(q.size());
    for (size_t i = 0; i < q.size(); i++) v[i] = load_as_f32(q.data(), t, int64_t(i));
    return v;
}

}  // namespace

TEST_CASE("quant: f8e4m3 conversions are PyTorch's float8_e4m3fn (every code, ties, overflow, NaN)") {
    io::SafetensorsFile f(golden_dir("quant") + "fp8_e4m3.safetensors");
    const std::vector<float> decode = read_f32(f, "decode"), in = read_f32(f, "encode_in");
    std::vector<uint8_t> out(size_t(f.info("encode_out").numel()));
    f.read("encode_out", out.data(), DType::u8);
    REQUIRE(decode.size() == 256);
    REQUIRE(out.size() == in.size());
    for (int c = 0; c < 256; c++) {
        const float ours = f8e4m3_to_f32(uint8_t(c));
        CHECK_MESSAGE((std::isnan(decode[size_t(c)]) ? std::isnan(ours) : bits(ours) == bits(decode[size_t(c)])),
                      "code ", c);
        // Every finite code is a bf16 and an f16 value: the kernels' conversion to T is exact.
        if (std::isfinite(ours)) {
            CHECK(bf16_to_f32(f32_to_bf16(ours)) == ours);
            CHECK(f16_to_f32(f32_to_f16(ours)) == ours);
        }
    }
    size_t wrong = 0;
    for (size_t i = 0; i < in.size(); i++) {
        const uint8_t ours = f32_to_f8e4m3(in[i]);
        if (ours != out[i] && wrong++ < 5) MESSAGE("encode ", in[i], ": ours ", int(ours), ", torch ", int(out[i]));
    }
    CHECK(wrong == 0);
    CHECK(in.size() > 5000);
}

TEST_CASE("quant: int8 rows round trip within half a step of their scale") {
    const int64_t rows = 70, cols = 33;
    const std::vector<float> w = varied_rows(rows, cols, 1);
    std::vector<uint8_t> q(w.size());
    std::vector<float> scale(static_cast<size_t>(rows)), back(w.size());
    quantize_rows(w.data(), rows, cols, WeightFormat::int8, q.data(), scale.data(), "w");
    dequantize_rows(q.data(), DType::i8, scale.data(), rows, cols, back.data());
    const std::vector<float> codes = decoded(q, DType::i8);
    for (int64_t r = 0; r < rows; r++) {
        float absmax = 0, top = 0;
        for (int64_t j = 0; j < cols; j++) {
            const size_t i = size_t(r * cols + j);
            absmax = std::max(absmax, std::fabs(w[i]));
            top = std::max(top, std::fabs(codes[i]));
            CHECK(std::fabs(codes[i]) <= 127.0f);
            CHECK(back[i] == scale[size_t(r)] * codes[i]);  // dequantization rounds once
            CHECK(std::fabs(double(w[i]) - double(back[i])) <= 0.5 * double(scale[size_t(r)]) * (1 + 1e-6));
        }
        CHECK(scale[size_t(r)] == absmax / 127.0f);
        CHECK(top == 127.0f);  // the largest element uses the whole range
    }
}

TEST_CASE("quant: fp8 rows round trip within 2^-4 relative (normal codes) or half a subnormal step") {
    const int64_t rows = 70, cols = 65;
    const std::vector<float> w = varied_rows(rows, cols, 2);
    std::vector<uint8_t> q(w.size());
    std::vector<float> scale(static_cast<size_t>(rows)), back(w.size());
    quantize_rows(w.data(), rows, cols, WeightFormat::fp8, q.data(), scale.data(), "w");
    dequantize_rows(q.data(), DType::f8e4m3, scale.data(), rows, cols, back.data());
    const std::vector<float> codes = decoded(q, DType::f8e4m3);
    for (int64_t r = 0; r < rows; r++) {
        const double s = scale[size_t(r)];
        float top = 0;
        for (int64_t j = 0; j < cols; j++) {
            const size_t i = size_t(r * cols + j);
            REQUIRE(std::isfinite(codes[i]));
            top = std::max(top, std::fabs(codes[i]));
            CHECK(back[i] == scale[size_t(r)] * codes[i]);
            const double err = std::fabs(double(w[i]) - double(back[i]));
            // 3 mantissa bits: half an ulp is 2^-4 of the value; below 2^-6 the step is 2^-9.
            const double bound = std::fabs(double(w[i])) >= s * 0x1p-6 ? 0x1p-4 * std::fabs(double(w[i])) : s * 0x1p-10;
            CHECK(err <= bound * (1 + 1e-6));
        }
        CHECK(top == 448.0f);
    }
}

TEST_CASE("quant: zero rows give scale 0, NaN and inf are refused naming the weight, row and element") {
    for (WeightFormat f : {WeightFormat::int8, WeightFormat::fp8}) {
        CAPTURE(weight_format_name(f));
        std::vector<float> w(4 * 5, 0.5f);
        for (int j = 0; j < 5; j++) w[size_t(5 + j)] = 0.0f;  // row 1
        std::vector<uint8_t> q(w.size(), 0xAA);
        std::vector<float> scale(4, -1.0f);
        quantize_rows(w.data(), 4, 5, f, q.data(), scale.data(), "zeros");
        CHECK(scale[1] == 0.0f);
        for (int j = 0; j < 5; j++) CHECK(load_as_f32(q.data(), weight_format_dtype(f), 5 + j) == 0.0f);

        std::vector<float> big(300 * 16, 0.25f);  // many rows: quantized in parallel, the first bad one named
        big[size_t(201 * 16 + 3)] = NAN;
        big[size_t(250 * 16 + 1)] = INFINITY;
        std::vector<uint8_t> qb(big.size());
        std::vector<float> sb(300);
        const std::string e = error_of([&] { quantize_rows(big.data(), 300, 16, f, qb.data(), sb.data(), "mid.conv.weight"); });
        CHECK(e.find("mid.conv.weight") != std::string::npos);
        CHECK(e.find("element 3 of row 201 is nan") != std::string::npos);
        big[size_t(201 * 16 + 3)] = 0.25f;
        CHECK(error_of([&] { quantize_rows(big.data(), 300, 16, f, qb.data(), sb.data(), "w"); })
                  .find("element 1 of row 250 is inf") != std::string::npos);
    }
    CHECK(parse_weight_format("int8") == WeightFormat::int8);
    CHECK(parse_weight_format("fp8") == WeightFormat::fp8);
    CHECK(parse_weight_format("dense") == WeightFormat::dense);
    CHECK(error_of([] { parse_weight_format("int4"); }).find("'int4'") != std::string::npos);
    CHECK_THROWS_AS(weight_format_dtype(WeightFormat::dense), gl::Error);
}

namespace {

// The tiny golden UNet: forward and backward of sum(eps * r) on the golden inputs (CPU, f32).
struct UnetRun {
    std::vector<float> eps, grad_x, grad_ctx;
    size_t frozen_bytes = 0;
};

// `requantize`: a dense store whose matrices are replaced by the dequantized codes of that format.
UnetRun run_unet(WeightFormat store, WeightFormat requantize = WeightFormat::dense) {
    const std::string dir = golden_dir("unet");
    io::SafetensorsFile inputs(dir + "io.safetensors"), weights(dir + "unet_diffusers.safetensors");
    Graph g;
    nn::Weights w(g, DType::f32, store);
    auto shape = [&](const char* n) { return Shape::of(inputs.info(n).shape); };
    ValueId x = g.param("x", DType::f32, shape("x")), t = g.input("t", DType::f32, shape("t"));
    ValueId ctx = g.param("context", DType::f32, shape("context")), r = g.input("r", DType::f32, shape("r"));
    ValueId eps = sd::unet_forward(w, sd::UnetConfig::tiny(), x, t, ctx);
    g.mark_output(eps);
    ValueId loss = sum(g, mul(g, eps, r));
    g.mark_output(loss);
    Gradients gr = backward(g, loss);
    Plan plan = make_plan(g);
    UnetRun out;
    out.frozen_bytes = plan.arena_bytes[size_t(Category::frozen)];
    auto rt = make_cpu_runtime(std::move(plan));
    rt->poison(0xff);
    sd::load_unet(w, sd::UnetConfig::tiny(), weights, *rt);
    if (requantize != WeightFormat::dense) {
        // The matrices a quantized store would hold, as the dense leaves' dequantized codes.
        Graph qg;
        nn::Weights qw(qg, DType::f32, requantize);
        sd::unet_forward(qw, sd::UnetConfig::tiny(), qg.input("x", DType::f32, shape("x")),
                         qg.input("t", DType::f32, shape("t")), qg.input("context", DType::f32, shape("context")));
        for (const nn::WeightEntry& q : qw.entries()) {
            if (q.scale == kNoValue) continue;
            const nn::WeightEntry* d = nullptr;
            for (const nn::WeightEntry& e : w.entries())
                if (e.name == q.name) d = &e;
            REQUIRE(d);
            std::vector<float> v = rt->read_f32(d->id);
            const Shape s = g.shape(d->id);
            const int64_t rows = s[0], cols = s.numel() / rows;
            std::vector<uint8_t> codes(v.size());
            std::vector<float> scale(static_cast<size_t>(rows));
            quantize_rows(v.data(), rows, cols, requantize, codes.data(), scale.data(), q.name);
            dequantize_rows(codes.data(), weight_format_dtype(requantize), scale.data(), rows, cols, v.data());
            rt->write_f32(d->id, v);
        }
    }
    for (const auto& [v, n] : {std::pair{x, "x"}, {t, "t"}, {ctx, "context"}, {r, "r"}}) rt->write_f32(v, read_f32(inputs, n));
    rt->run();
    out.eps = rt->read_f32(eps);
    out.grad_x = rt->read_f32(gr[x]);
    out.grad_ctx = rt->read_f32(gr[ctx]);
    return out;
}

}  // namespace

TEST_CASE("quant: a quantized store holds matrices as codes + row scales, loaded quantized from the checkpoint") {
    const std::string dir = golden_dir("unet");
    io::SafetensorsFile inputs(dir + "io.safetensors"), weights(dir + "unet_diffusers.safetensors");
    auto build = [&](Graph& g, nn::Weights& w) {
        auto in = [&](const char* n) { return g.input(n, DType::f32, Shape::of(inputs.info(n).shape)); };
        sd::unet_forward(w, sd::UnetConfig::tiny(), in("x"), in("t"), in("context"));
    };
    Graph dg, qg;
    nn::Weights dense(dg, DType::f32), quant(qg, DType::bf16, WeightFormat::int8);
    build(dg, dense);
    build(qg, quant);
    auto drt = make_cpu_runtime(make_plan(dg)), qrt = make_cpu_runtime(make_plan(qg));
    const nn::LoadReport dr = sd::load_unet(dense, sd::UnetConfig::tiny(), weights, *drt);
    const nn::LoadReport qr = sd::load_unet(quant, sd::UnetConfig::tiny(), weights, *qrt);
    CHECK(qr.tensors == dr.tensors);
    CHECK(qr.bytes < dr.bytes / 3);  // f32 against codes (bf16 for norms and biases)
    REQUIRE(quant.entries().size() == dense.entries().size());
    int matrices = 0;
    for (size_t k = 0; k < quant.entries().size(); k++) {
        const nn::WeightEntry &q = quant.entries()[k], &d = dense.entries()[k];
        REQUIRE(q.name == d.name);
        CAPTURE(q.name);
        if (qg.shape(q.id).nd == 1) {  // norms and biases stay in the store's dtype
            CHECK(q.scale == kNoValue);
            CHECK(qg.dtype(q.id) == DType::bf16);
            continue;
        }
        REQUIRE(q.scale != kNoValue);
        matrices++;
        CHECK(qg.dtype(q.id) == DType::i8);
        CHECK(qg.v(q.scale).name == q.name + ".scale");
        CHECK(qg.shape(q.scale) == Shape{qg.shape(q.id)[0]});
        CHECK(qg.v(q.id).role == Role::weight);
        const std::vector<float> v = drt->read_f32(d.id);  // the leaf layout (OHWI for convs)
        const int64_t rows = qg.shape(q.id)[0], cols = int64_t(v.size()) / rows;
        std::vector<uint8_t> codes(v.size());
        std::vector<float> scale(static_cast<size_t>(rows));
        quantize_rows(v.data(), rows, cols, WeightFormat::int8, codes.data(), scale.data(), q.name);
        CHECK(qrt->read_f32(q.id) == decoded(codes, DType::i8));
        CHECK(qrt->read_f32(q.scale) == scale);
    }
    CHECK(matrices > 40);
    // Asked for as a plain weight, a quantized matrix is an error naming it.
    const nn::WeightEntry* conv_in = nullptr;
    for (const nn::WeightEntry& e : quant.entries())
        if (e.name == "conv_in.weight") conv_in = &e;
    REQUIRE(conv_in);
    CHECK(error_of([&] { quant.get("conv_in.weight", qg.shape(conv_in->id)); }) ==
          "weights: conv_in.weight is a quantized matrix, asked for as a plain weight");
}

TEST_CASE("quant: the quantized UNet equals the dense UNet on dequantized weights (forward and gradients)") {
    const UnetRun dense = run_unet(WeightFormat::dense);
    double eps_error[2] = {};
    for (WeightFormat f : {WeightFormat::int8, WeightFormat::fp8}) {
        const std::string name = weight_format_name(f);
        CAPTURE(name);
        const UnetRun q = run_unet(f), ref = run_unet(WeightFormat::dense, f);
        // The same products in f32, one rounding of scale * code apart: equal to rounding.
        CHECK(rel_error(q.eps, ref.eps) <= 1e-5);
        CHECK(rel_error(q.grad_x, ref.grad_x) <= 1e-5);
        CHECK(rel_error(q.grad_ctx, ref.grad_ctx) <= 1e-5);
        // Against the original weights: the quantization error itself, through the golden model's
        // 3 resolutions of random weights (int8 1.9 % / 3.2 %, fp8 11 % / 33 % when written). The
        // bounds catch a wrong scale or layout (errors of 100 % and more), not a few per cent.
        const double e = rel_error(q.eps, dense.eps), gx = rel_error(q.grad_x, dense.grad_x);
        MESSAGE(name, " UNet: eps rel. error ", e, ", grad x ", gx, " against the f32 weights; frozen ", q.frozen_bytes,
                " bytes against ", dense.frozen_bytes);
        eps_error[f == WeightFormat::fp8] = e;
        CHECK(e > 0);  // quantization changed something: the weights really are stored in 8 bits
        CHECK(e < (f == WeightFormat::int8 ? 0.05 : 0.25));
        CHECK(gx < (f == WeightFormat::int8 ? 0.08 : 0.6));
        CHECK(q.frozen_bytes < dense.frozen_bytes / 3);
    }
    CHECK(eps_error[0] < eps_error[1]);  // 127 levels per row are finer than 3 mantissa bits
}
