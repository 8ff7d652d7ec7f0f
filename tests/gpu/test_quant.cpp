// 8-bit frozen weights on CUDA (core/quant.h): the quantized GEMM and conv kernels at SD1.5's
// sizes against the dense kernels on the same weights (the dequantized codes, rounded as the
// quantized kernels round them), forward and input gradient, bf16 / f16 / f32; and the tiny LoRA
// on an int8 / fp8 base follows the CPU's loss curve. The small shapes of every path are the op
// cases' (cases_matmul.cpp, cases_conv.cpp) against the CPU reference.
#include <doctest/doctest.h>

#include <cmath>
#include <random>

#include "models/sd15/sd_config.h"
#include "ggml-lite/core/planner.h"
#include "ggml-lite/core/quant.h"
#include "ggml-lite/io/safetensors.h"
#include "train/trainer.h"
#include "../op_harness.h"
#include "../train_fixtures.h"

using namespace gl;
using train_test::normal;

namespace {

// A weight [rows, ...] quantized to format f: codes, scales, and the dense weight the quantized
// kernels compute with (scale * code rounded to `dense`), as f32 host values.
struct QWeight {
    std::vector<float> codes, scale, dense;
};
QWeight make_weight(const Shape& s, WeightFormat f, DType dense, uint32_t seed) {
    const int64_t rows = s[0], cols = s.numel() / rows;
    const std::vector<float> w = normal(size_t(s.numel()), seed, 0.05f);
    std::vector<uint8_t> q(w.size());
    QWeight r;
    r.scale.resize(size_t(rows));
    quantize_rows(w.data(), rows, cols, f, q.data(), r.scale.data(), "w");
    const DType ct = weight_format_dtype(f);
    for (size_t i = 0; i < q.size(); i++) {
        r.codes.push_back(load_as_f32(q.data(), ct, int64_t(i)));
        const float v = r.scale[i / size_t(cols)] * r.codes.back();
        r.dense.push_back(dense == DType::bf16 ? bf16_to_f32(f32_to_bf16(v))
                          : dense == DType::f16 ? f16_to_f32(f32_to_f16(v))
                                                : v);
    }
    return r;
}

// One problem both ways on the GPU: op(q) with the quantized weight, op(d) with the dense one.
struct Pair {
    Graph g;
    std::vector<std::pair<ValueId, std::vector<float>>> data;
    std::vector<std::pair<ValueId, ValueId>> outs;  // (quantized, dense)

    ValueId input(const char* name, DType t, const Shape& s, uint32_t seed) {
        ValueId v = g.input(name, t, s);
        data.emplace_back(v, normal(size_t(s.numel()), seed));
        return v;
    }
    // The weight's two forms: {codes, scale} and the dense leaf.
    std::pair<QuantWeight, ValueId> weight(const char* name, const Shape& s, WeightFormat f, DType t, uint32_t seed) {
        QWeight w = make_weight(s, f, t, seed);
        const std::string n = name;
        QuantWeight q{g.weight(n + ".q", weight_format_dtype(f), s), g.weight(n + ".scale", DType::f32, {s[0]})};
        ValueId d = g.weight(n + ".dense", t, s);
        data.emplace_back(q.q, w.codes);
        data.emplace_back(q.scale, w.scale);
        data.emplace_back(d, w.dense);
        return {q, d};
    }
    void compare(ValueId q, ValueId d) {
        g.mark_output(q);
        g.mark_output(d);
        outs.emplace_back(q, d);
    }
    // Worst relative difference over the outputs (exact for f32: the same kernels, the same sums).
    double run() {
        auto rt = make_cuda_runtime(make_plan(g));
        rt->poison(0xff);
        for (auto& [v, d] : data) rt->write_f32(v, d);
        rt->run();
        double worst = 0;
        for (auto& [q, d] : outs) {
            const std::vector<float> a = rt->read_f32(q), b = rt->read_f32(d);
            for (float e : a) REQUIRE(std::isfinite(e));
            worst = std::max(worst, gltest::rel_err(a, b, 1e-6));
        }
        return worst;
    }
};

}  // namespace

TEST_CASE("quantized GEMMs on CUDA equal the dense kernels on the dequantized weights (SD1.5 sizes)") {
    struct Lin {
        int64_t M, K, N;
    };
    // attn to_q (K64 tiles), ff.net.0 (wide N), ff.net.2 (long K, wide), a time embedding row
    // (split K), to_k on the 77 context rows (an unaligned M), odd K (the predicated loader).
    const Lin lins[] = {{4096, 320, 320}, {1024, 640, 5120}, {256, 5120, 1280}, {2, 1280, 1280}, {77, 768, 640},
                        {10, 13, 24}};
    for (DType t : {DType::bf16, DType::f16, DType::f32}) {
        for (WeightFormat f : {WeightFormat::int8, WeightFormat::fp8}) {
            for (const Lin& l : lins) {
                CAPTURE(dtype_name(t));
                CAPTURE(weight_format_name(f));
                CAPTURE(l.M);
                CAPTURE(l.K);
                CAPTURE(l.N);
                Pair p;
                ValueId x = p.input("x", t, {l.M, l.K}, 1);
                ValueId gy = p.input("gy", t, {l.M, l.N}, 2);
                ValueId bias = p.input("bias", t, {l.N}, 3);
                auto [q, d] = p.weight("w", {l.N, l.K}, f, t, 4);
                p.compare(linear(p.g, x, q, bias), linear(p.g, x, d, bias));  // forward: W x
                p.compare(matmul(p.g, gy, q), matmul(p.g, gy, d));            // input gradient: W^T dy
                auto [q2, d2] = p.weight("b", {l.K, l.N}, f, t, 5);           // a K-row-major B
                p.compare(matmul(p.g, x, q2), matmul(p.g, x, d2));
                const double e = p.run();
                CHECK(e <= (t == DType::f32 ? 0.0 : 1e-2));
            }
        }
    }
}

TEST_CASE("quantized convolutions on CUDA equal the dense kernels on the dequantized weights (SD1.5 sizes)") {
    struct Conv {
        int64_t N, H, W, C, Co;
        int k, stride, pad;
    };
    // resnet conv (tap-first channel slices), downsampler (stride-2 input-gradient phases), a
    // 1x1 shortcut, conv_in's 4 channels (the FFMA path), an odd Cout.
    const Conv convs[] = {{1, 32, 32, 320, 320, 3, 1, 1}, {2, 16, 16, 640, 640, 3, 2, 1}, {1, 16, 16, 960, 640, 1, 1, 0},
                          {1, 64, 64, 4, 320, 3, 1, 1},   {1, 8, 8, 64, 24, 3, 1, 1}};
    for (DType t : {DType::bf16, DType::f16, DType::f32}) {
        for (WeightFormat f : {WeightFormat::int8, WeightFormat::fp8}) {
            for (const Conv& c : convs) {
                CAPTURE(dtype_name(t));
                CAPTURE(weight_format_name(f));
                CAPTURE(c.C);
                CAPTURE(c.Co);
                CAPTURE(c.stride);
                Pair p;
                ValueId x = p.input("x", t, {c.N, c.H, c.W, c.C}, 1);
                ValueId bias = p.input("bias", t, {c.Co}, 3);
                auto [q, d] = p.weight("w", {c.Co, c.k, c.k, c.C}, f, t, 4);
                ValueId yq = conv2d(p.g, x, q, bias, c.stride, c.pad);
                p.compare(yq, conv2d(p.g, x, d, bias, c.stride, c.pad));
                ValueId gy = p.input("gy", t, p.g.shape(yq), 2);
                p.compare(conv2d_grad_input(p.g, gy, q, c.stride, c.pad, c.H, c.W),
                          conv2d_grad_input(p.g, gy, d, c.stride, c.pad, c.H, c.W));
                const double e = p.run();
                CHECK(e <= (t == DType::f32 ? 0.0 : 1e-2));
            }
        }
    }
}

namespace {

// 30 tiny LoRA steps on a quantized base: the per-step losses (CPU or CUDA).
std::vector<double> tiny_curve(bool cuda, train::Precision prec, WeightFormat f) {
    train::StepOptions o = train_test::tiny_options(prec, 2, 1, 4e-3f);
    o.base_format = f;
    auto s = train::build_step(o);
    auto rt = cuda ? make_cuda_runtime(make_plan(s->g, {Recompute::blocks}))
                   : make_cpu_runtime(make_plan(s->g, {Recompute::blocks}));
    rt->poison(0xff);
    io::SafetensorsFile file(train_test::kTinyUnet);
    sd::load_unet(*s->unet_weights, sd::sd_config(*o.config).unet, file, *rt);
    train::TrainerOptions to;
    to.seed = 17;
    train::Trainer tr(*s, *rt, to);
    tr.init(6);
    const std::vector<float> data = normal(size_t(s->latent_numel()), 1), ctx = normal(size_t(s->context_numel()), 2);
    std::vector<double> loss;
    for (int k = 0; k < 30; k++) {
        const train::StepReport r = tr.step(data, ctx);
        REQUIRE(r.applied);
        loss.push_back(r.loss);
    }
    return loss;
}

}  // namespace

TEST_CASE("train on CUDA: the tiny LoRA on an int8 / fp8 base follows the CPU's loss curve") {
    for (train::Precision prec : {train::Precision::fp32, train::Precision::bf16}) {
        for (WeightFormat f : {WeightFormat::int8, WeightFormat::fp8}) {
            CAPTURE(train::precision_name(prec));
            CAPTURE(weight_format_name(f));
            const std::vector<double> cpu = tiny_curve(false, prec, f), gpu = tiny_curve(true, prec, f);
            double worst = 0;
            for (size_t k = 0; k < cpu.size(); k++) {
                REQUIRE(std::isfinite(gpu[k]));
                worst = std::max(worst, std::fabs(gpu[k] - cpu[k]) / cpu[k]);
            }
            MESSAGE(train::precision_name(prec), " on ", weight_format_name(f), ": worst per-step loss rel. diff ", worst);
            CHECK(worst < (prec == train::Precision::fp32 ? 2e-3 : 3e-2));  // as the dense base's test
        }
    }
}
