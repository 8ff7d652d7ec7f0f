// Shared memory (core/shared_memory.h) on the CPU: bucket plans and a forward-only plan on one
// copy of the weights, LoRA parameters and optimizer state give bitwise the results of separate
// runtimes (the scenarios of shared_memory_cases.h); the layout's bytes are exactly what is
// allocated; disagreeing or unlisted plans are refused naming the value.
#include "shared_memory_cases.h"

using namespace gl;
using namespace shared_test;

TEST_CASE("shared memory: two bucket steps and a forward-only plan run bitwise as separate runtimes") {
    buckets_match_separate_runtimes("cpu", 2);
}

TEST_CASE("shared memory: UNet buckets and a forward-only UNet share one copy of weights and LoRA") {
    unet_buckets_share("cpu", 1);
}

TEST_CASE("shared memory: the layout's bytes are exactly what is allocated") {
    auto a = build(4, true), b = build(12, true), s = build(3, false, true);
    Plan pa = plan_of(*a), pb = plan_of(*b), ps = plan_of(*s);
    SharedLayout L = make_shared_layout({&pa, &pb, &ps}, "cpu");
    const auto bytes = [](Category c, const Plan& p) { return p.arena_bytes[size_t(c)]; };

    // Persistent values once: the steps hold every weight, parameter, gradient and state but the
    // sampler's own weight, which comes once on top.
    CHECK(L.arena_bytes[size_t(Category::frozen)] == bytes(Category::frozen, pa) + align256(kIn * kIn * 4));
    CHECK(bytes(Category::frozen, pa) == align256(kOut * kIn * 4) + align256(kOut * 2));
    CHECK(L.arena_bytes[size_t(Category::trainable)] == bytes(Category::trainable, pa));
    CHECK(bytes(Category::trainable, pa) == 2 * (align256(kRank * kIn * 4) + align256(kOut * kRank * 4)));
    CHECK(L.arena_bytes[size_t(Category::optimizer)] == bytes(Category::optimizer, pb));
    // One activation arena: the largest plan's.
    const size_t act = std::max({bytes(Category::activations, pa), bytes(Category::activations, pb),
                                 bytes(Category::activations, ps)});
    CHECK(act == bytes(Category::activations, pb));
    CHECK(L.arena_bytes[size_t(Category::activations)] == act);
    CHECK(L.scratch_bytes == 0);
    size_t sum = 0;
    for (size_t x : L.arena_bytes) sum += x;
    CHECK(L.total_bytes() == sum);
    CHECK(L.unshared_bytes() == pa.total_bytes() + pb.total_bytes() + ps.total_bytes());
    CHECK(L.total_bytes() < L.unshared_bytes());

    // Per plan: what only it holds (the sampler's weight; the steps share everything).
    REQUIRE(L.members.size() == 3);
    CHECK(L.members[0].unshared_values == 0);
    CHECK(L.members[2].unshared_values == 1);
    CHECK(L.members[2].unshared == size_t(kIn * kIn * 4));
    CHECK(L.members[1].persistent == L.members[0].persistent);
    CHECK(L.report().find("only here: 1 values") != std::string::npos);

    auto mem = make_shared_memory(L);
    auto ra = make_cpu_runtime(pa, mem), rs = make_cpu_runtime(ps, mem);
    for (int c = 0; c < kCategoryCount; c++) {
        CHECK(mem->allocated_bytes(Category(c)) == L.arena_bytes[size_t(c)]);
        CHECK(ra->allocated_bytes(Category(c)) == L.arena_bytes[size_t(c)]);
        CHECK(rs->allocated_bytes(Category(c)) == L.arena_bytes[size_t(c)]);
    }
    CHECK(ra->shared_memory() == mem.get());
    CHECK(ra->memory_report().find("shared memory (cpu, 3 plans") != std::string::npos);
    // The bound plan: persistent arenas of the layout, its own activations.
    CHECK(ra->plan().arena_bytes[size_t(Category::frozen)] == L.arena_bytes[size_t(Category::frozen)]);
    CHECK(ra->plan().arena_bytes[size_t(Category::activations)] == bytes(Category::activations, pa));
}

TEST_CASE("shared memory: a plan that was not listed runs when it fits, else is refused") {
    auto a = build(12, true), s = build(3, false, true);
    Plan pa = plan_of(*a), ps = plan_of(*s);
    auto mem = make_shared_memory(make_shared_layout({&pa, &ps}, "cpu"));
    auto ra = make_cpu_runtime(pa, mem);
    ra->poison(0);
    write_persistent(*ra, *a);

    auto small = build(2, true);  // a smaller bucket fits the arena
    auto rsmall = make_cpu_runtime(plan_of(*small), mem);
    auto usmall = make_cpu_runtime(plan_of(*small));
    write_persistent(*usmall, *small);
    write_step_inputs(*rsmall, *small, 7);
    rsmall->run();
    write_step_inputs(*usmall, *small, 7);
    usmall->run();
    CHECK(rsmall->read_f32(small->loss) == usmall->read_f32(small->loss));
    CHECK(ra->read_f32(a->down) == usmall->read_f32(small->down));

    auto big = build(40, true);  // a larger bucket does not
    CHECK_THROWS_WITH_AS(make_cpu_runtime(plan_of(*big), mem), doctest::Contains("activations need"), Error);
    Model other;  // a leaf the layout lacks
    other.g.weight("base.w", DType::f32, {kOut, kIn});
    ValueId z = other.g.weight("unknown.w", DType::f32, {kOut, kIn});
    other.g.mark_output(add(other.g, z, z));
    CHECK_THROWS_WITH_AS(make_cpu_runtime(make_plan(other.g), mem), doctest::Contains("unknown.w"), Error);
    PlanOptions wide;
    wide.alignment = 512;
    CHECK_THROWS_WITH_AS(make_cpu_runtime(make_plan(small->g, wide), mem), doctest::Contains("aligns values to 512"),
                         Error);
    CHECK_THROWS_AS(make_cpu_runtime(pa, nullptr), Error);
}

TEST_CASE("shared memory: plans that disagree on a persistent value are refused naming it") {
    auto a = build(4, true);
    Plan pa = plan_of(*a);
    auto refused = [&](Graph& g, const char* what) {
        Plan p = make_plan(g);
        CHECK_THROWS_WITH_AS(make_shared_layout({&pa, &p}, "cpu"), doctest::Contains(what), Error);
    };
    auto with = [&](auto leaf) {
        Graph g;
        ValueId v = leaf(g);
        g.mark_output(add(g, v, v));
        return g;
    };
    Graph shape = with([](Graph& g) { return g.param("lora.down", DType::f32, {kRank + 1, kIn}); });
    refused(shape, "'lora.down' is a parameter f32[2, 6] in trainable + grads in plan 0 but a parameter f32[3, 6]");
    Graph dtype = with([](Graph& g) { return g.weight("base.w", DType::bf16, {kOut, kIn}); });
    refused(dtype, "'base.w' is a weight f32[8, 6]");
    Graph role = with([](Graph& g) { return g.weight("lora.up", DType::f32, {kOut, kRank}); });
    refused(role, "'lora.up' is a parameter");
    Graph state = with([](Graph& g) { return g.weight("opt.lora.down.m", DType::f32, {kRank, kIn}); });
    refused(state, "opt.lora.down.m");

    Graph dup;
    ValueId d1 = dup.weight("twice", DType::f32, {2}), d2 = dup.weight("twice", DType::f32, {2});
    dup.mark_output(add(dup, d1, d2));
    Plan pd = make_plan(dup);
    CHECK_THROWS_WITH_AS(make_shared_layout({&pd}, "cpu"), doctest::Contains("two persistent values named 'twice'"),
                         Error);
    CHECK_THROWS_WITH_AS(make_shared_layout({&pa}, "tpu"), doctest::Contains("unknown backend 'tpu'"), Error);
    CHECK_THROWS_AS(make_shared_layout({}, "cpu"), Error);
}
