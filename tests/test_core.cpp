// Core pieces below the ops: dtype conversions, shapes and layouts, graph misuse, the backend choice.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "ggml-lite/core/dtype.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/core/graph.h"
#include "ggml-lite/core/planner.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/ops/builder.h"

using namespace gl;

namespace {

float from_bits(uint32_t u) { return std::bit_cast<float>(u); }
uint32_t to_bits(float f) { return std::bit_cast<uint32_t>(f); }

// Round-to-nearest-even by brute force over the sorted non-negative finite values of a format.
uint16_t nearest_even(double x, const std::vector<std::pair<double, uint16_t>>& table, uint16_t inf_bits) {
    double a = std::fabs(x);
    uint16_t sign = std::signbit(x) ? 0x8000 : 0;
    auto it = std::lower_bound(table.begin(), table.end(), std::make_pair(a, uint16_t(0)));
    if (it == table.end()) return uint16_t(sign | inf_bits);
    if (it->first == a || it == table.begin()) return uint16_t(sign | it->second);
    auto lo = std::prev(it);
    double dl = a - lo->first, dh = it->first - a;
    if (dl < dh) return uint16_t(sign | lo->second);
    if (dh < dl) return uint16_t(sign | it->second);
    return uint16_t(sign | ((lo->second & 1) == 0 ? lo->second : it->second));
}

}  // namespace

TEST_CASE("dtype sizes and names") {
    CHECK(dtype_size(DType::f32) == 4);
    CHECK(dtype_size(DType::bf16) == 2);
    CHECK(dtype_size(DType::f16) == 2);
    CHECK(dtype_size(DType::i32) == 4);
    CHECK(dtype_size(DType::u8) == 1);
    CHECK(dtype_size(DType::i8) == 1);
    CHECK(std::string(dtype_name(DType::bf16)) == "bf16");
    CHECK(dtype_is_float(DType::f16));
    CHECK(!dtype_is_float(DType::i32));
}

TEST_CASE("f16 and bf16: every bit pattern survives a round trip through f32") {
    for (uint32_t h = 0; h < 65536; h++) {
        float f = f16_to_f32(uint16_t(h));
        if (std::isnan(f)) {
            CHECK(std::isnan(f16_to_f32(f32_to_f16(f))));
            continue;
        }
        REQUIRE(f32_to_f16(f) == h);
        float b = bf16_to_f32(uint16_t(h));
        if (!std::isnan(b)) REQUIRE(f32_to_bf16(b) == h);
    }
    CHECK(f16_to_f32(0x3c00) == 1.0f);
    CHECK(f16_to_f32(0x0001) == std::ldexp(1.0f, -24));  // smallest subnormal
    CHECK(f16_to_f32(0x7bff) == 65504.0f);
}

TEST_CASE("f32 -> f16 and f32 -> bf16 round to nearest, ties to even") {
    std::vector<std::pair<double, uint16_t>> t16, tb16;
    for (uint32_t h = 0; h < 0x7c00; h++) t16.emplace_back(double(f16_to_f32(uint16_t(h))), uint16_t(h));
    for (uint32_t h = 0; h < 0x7f80; h++) tb16.emplace_back(double(bf16_to_f32(uint16_t(h))), uint16_t(h));
    // Past the largest finite value, the next step (one more ulp) is infinity.
    t16.emplace_back(65536.0, 0x7c00);
    tb16.emplace_back(std::ldexp(1.0, 128), 0x7f80);
    std::mt19937 rng(11);
    std::uniform_int_distribution<uint32_t> bits;
    int checked = 0;
    for (int i = 0; i < 200000; i++) {
        float f = from_bits(bits(rng));
        if (!std::isfinite(f)) continue;
        if (i % 2) f = std::ldexp(std::fabs(f) / std::exp2(std::ilogb(f)), int(i % 40) - 26) * (f < 0 ? -1 : 1);  // f16 range
        CHECK(f32_to_f16(f) == nearest_even(double(f), t16, 0x7c00));
        CHECK(f32_to_bf16(f) == nearest_even(double(f), tb16, 0x7f80));
        checked++;
    }
    CHECK(checked > 100000);
    // Exact ties: 1 + 2^-11 lies halfway between 1 and 1 + 2^-10 (even: 1); 1 + 3*2^-11 rounds up.
    CHECK(f32_to_f16(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);
    CHECK(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);
    CHECK(f32_to_bf16(from_bits(0x3f808000)) == 0x3f80);  // tie, even below
    CHECK(f32_to_bf16(from_bits(0x3f818000)) == 0x3f82);  // tie, even above
    CHECK(f32_to_f16(65520.0f) == 0x7c00);
    CHECK(f32_to_f16(65519.0f) == 0x7bff);
    CHECK(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
    CHECK(f32_to_f16(-0.0f) == 0x8000);
}

TEST_CASE("integer stores round and saturate") {
    int32_t i32[3];
    store_from_f32(i32, DType::i32, 0, 2.5f);
    store_from_f32(i32, DType::i32, 1, -1e20f);
    store_from_f32(i32, DType::i32, 2, NAN);
    CHECK(i32[0] == 2);  // nearest even
    CHECK(i32[1] == std::numeric_limits<int32_t>::min());
    CHECK(i32[2] == 0);
    uint8_t u8[2];
    store_from_f32(u8, DType::u8, 0, 300.0f);
    store_from_f32(u8, DType::u8, 1, -3.0f);
    CHECK(u8[0] == 255);
    CHECK(u8[1] == 0);
    int8_t i8[1];
    store_from_f32(i8, DType::i8, 0, -200.0f);
    CHECK(i8[0] == -128);
    CHECK(load_as_f32(u8, DType::u8, 0) == 255.0f);
}

TEST_CASE("shapes, layouts and broadcasting") {
    Shape s{2, 3, 4};
    CHECK(s.numel() == 24);
    CHECK(s.str() == "[2, 3, 4]");
    CHECK(s.dim(-1) == 4);
    Layout l = Layout::contiguous(s);
    CHECK(l.stride[0] == 12);
    CHECK(l.is_contiguous());
    CHECK(l.span() == 24);
    CHECK(l.index_of(23) == 23);
    CHECK(Shape{}.numel() == 1);
    CHECK(broadcast_shapes({3, 1}, {4}, "t") == Shape{3, 4});
    CHECK(broadcast_shapes({2, 1, 5}, {3, 1}, "t") == Shape{2, 3, 5});
    CHECK_THROWS_AS(broadcast_shapes({3, 2}, {3}, "t"), Error);
    CHECK_THROWS_AS(Shape({1, 2, 3, 4, 5}), Error);
    CHECK_THROWS_AS(Shape({2, -1}), Error);
    CHECK(norm_axis(-1, 3, "t") == 2);
    CHECK_THROWS_AS(norm_axis(3, 3, "t"), Error);
}

TEST_CASE("views share storage without copies, and copy only when they must") {
    Graph g;
    ValueId x = g.input("x", DType::f32, {2, 3, 4});
    ValueId r = reshape(g, x, {6, 4});
    CHECK(g.v(r).base == x);
    ValueId p = permute(g, x, {2, 0, 1});
    CHECK(g.v(p).base == x);
    CHECK(!g.v(p).layout.is_contiguous());
    ValueId s = slice(g, x, 2, 1, 2);
    CHECK(g.v(s).base == x);
    CHECK(g.v(s).layout.offset == 1);
    ValueId e = expand(g, g.input("b", DType::f32, {4}), {3, 4});
    CHECK(g.v(e).layout.stride[0] == 0);
    size_t before = g.nodes.size();
    ValueId rp = reshape(g, p, {4, 6});  // not expressible as a view: copies first
    CHECK(g.nodes.size() == before + 2);
    CHECK(g.v(rp).base != x);
    CHECK(contiguous(g, x) == x);  // already dense: no node
}

TEST_CASE("graph misuse throws gl::Error naming the op, shapes and dtypes") {
    Graph g;
    ValueId a = g.input("a", DType::f32, {2, 3});
    ValueId b = g.input("b", DType::f32, {4, 5});
    try {
        add(g, a, b);
        FAIL("no error");
    } catch (const Error& e) {
        std::string m = e.what();
        CHECK(m.find("add") != std::string::npos);
        CHECK(m.find("[2, 3]") != std::string::npos);
        CHECK(m.find("[4, 5]") != std::string::npos);
        CHECK(m.find("f32") != std::string::npos);
    }
    CHECK_THROWS_AS(g.v(12345), Error);
    CHECK_THROWS_AS(add(g, a, 999), Error);
    CHECK_THROWS_AS(g.pop_scope(), Error);
    CHECK_THROWS_AS(g.end_segment(), Error);
    g.begin_segment("s");
    CHECK_THROWS_AS(g.begin_segment("inner"), Error);
    g.end_segment();
    {
        Scope sc(g, "block");
        CHECK(g.v(scale(g, a, 2.0f)).name == "block.scale");
    }
}

TEST_CASE("backend choice: names, refusals, auto resolved against this build and machine") {
    for (Backend b : {Backend::automatic, Backend::cpu, Backend::cuda}) CHECK(parse_backend(backend_name(b)) == b);
    CHECK(std::string(backend_name(Backend::automatic)) == "auto");
    for (const char* bad : {"gpu", "CUDA", "", "cpu "})
        CHECK_THROWS_WITH_AS(parse_backend(bad), doctest::Contains("unknown backend"), Error);

    std::string why;
    CHECK(resolve_backend(Backend::cpu, &why) == Backend::cpu);
    CHECK(why.empty());
    std::string cuda_why;
    const bool cuda = cuda_available(&cuda_why);
    CHECK(resolve_backend(Backend::automatic, &why) == (cuda ? Backend::cuda : Backend::cpu));
    CHECK(why == (cuda ? "" : cuda_why));  // auto says why it fell back to the CPU
    if (cuda) CHECK(resolve_backend(Backend::cuda) == Backend::cuda);
    else CHECK_THROWS_WITH_AS(resolve_backend(Backend::cuda), doctest::Contains(cuda_why.c_str()), Error);

    Graph g;
    ValueId x = g.input("x", DType::f32, {3});
    g.mark_output(scale(g, x, 2.0f));
    CHECK(std::string(make_runtime(make_plan(g), Backend::cpu)->backend_name()) == "cpu");
    CHECK(std::string(make_runtime(make_plan(g), Backend::automatic)->backend_name()) == (cuda ? "cuda" : "cpu"));
}
