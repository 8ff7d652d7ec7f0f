// Runtime::share_arena: graphs of one model at different shapes running on one copy of its
// weights, and the layout check that refuses graphs whose weights differ.
#include <doctest/doctest.h>

#include "ggml-lite/core/runtime.h"
#include "ggml-lite/ops/builder.h"
#include "test_util.h"

using namespace gl;

namespace {
struct Net {
    Graph g;
    ValueId x, w, b, y;
    Net(int64_t rows, const char* wname = "w") {
        x = g.input("x", DType::f32, {rows, 3});
        w = g.weight(wname, DType::f32, {4, 3});
        b = g.weight("b", DType::f32, {4});
        y = gl::add(g, gl::linear(g, x, w), b);
        g.mark_output(y);
    }
};
}  // namespace

TEST_CASE("share_arena: a second shape runs on the first runtime's weights") {
    Net a(2), b(5);
    auto ra = make_cpu_runtime(make_plan(a.g));
    auto rb = make_cpu_runtime(make_plan(b.g));
    ra->write_f32(a.w, {1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1});
    ra->write_f32(a.b, {0.5f, 0, 0, -1});
    rb->share_arena(Category::frozen, *ra);
    CHECK(rb->allocated_bytes(Category::frozen) == 0);
    rb->write_f32(b.x, {1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 1, 1, 0, 0, 2});
    rb->run();
    const std::vector<float> y = rb->read_f32(b.y);
    CHECK(y == std::vector<float>{1.5f, 2, 3, 5, 4.5f, 5, 6, 14, 7.5f, 8, 9, 23, 1.5f, 1, 1, 2, 0.5f, 0, 2, 1});
    // Writes through the borrower land in the owner's arena.
    rb->write_f32(b.b, {0, 0, 0, 0});
    CHECK(ra->read_f32(a.b) == std::vector<float>{0, 0, 0, 0});
    rb->poison(0xff);  // poisons only what it allocated
    CHECK(ra->read_f32(a.w)[0] == 1.0f);
}

TEST_CASE("share_arena: refusals") {
    using gltest::error_of;
    Net a(2), other(2, "v");
    auto ra = make_cpu_runtime(make_plan(a.g));
    auto ro = make_cpu_runtime(make_plan(other.g));
    CHECK(error_of([&] { ro->share_arena(Category::frozen, *ra); }).find("frozen weights value 0 is v f32[4, 3] here and w f32[4, 3]") !=
          std::string::npos);
    CHECK(error_of([&] { ro->share_arena(Category::activations, *ra); }).find("planned per graph") != std::string::npos);
    CHECK(error_of([&] { ra->share_arena(Category::frozen, *ra); }).find("its own arena") != std::string::npos);
    Graph g;
    g.mark_output(gl::scale(g, g.weight("w", DType::f32, {4, 3}), 2.0f));
    auto r1 = make_cpu_runtime(make_plan(g));
    CHECK(error_of([&] { r1->share_arena(Category::frozen, *ra); }).find("holds 1 values") != std::string::npos);
}
