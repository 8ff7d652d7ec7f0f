// Shared memory on CUDA: the scenarios of shared_memory_cases.h (bucket steps and a forward-only
// plan on one copy of weights, LoRA and state, bit for bit as separate CUDA runtimes, each
// runtime's captured graph replayed while the others change the shared values; the tiny UNet in
// two buckets with a sampler's UNet), and the device bytes: the layout's, nothing per runtime.
#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <cmath>

#include "../shared_memory_cases.h"

using namespace gl;
using namespace shared_test;

namespace {

size_t device_bytes_in_use() {
    size_t free = 0, total = 0;
    REQUIRE(cudaMemGetInfo(&free, &total) == cudaSuccess);
    return total - free;
}

constexpr size_t kMiB = size_t(1) << 20;

}  // namespace

TEST_CASE("CUDA shared memory: two bucket steps and a forward-only plan run bitwise as separate runtimes") {
    buckets_match_separate_runtimes("cuda", 3);
}

TEST_CASE("CUDA shared memory: UNet buckets and a forward-only UNet share one copy of weights and LoRA") {
    unet_buckets_share("cuda", 3);
}

TEST_CASE("CUDA shared memory: the device holds the layout's bytes and no runtime allocates arenas") {
    // A 64 MiB frozen weight in every plan: a second copy of it would show in the device's use.
    auto with_big = [](std::unique_ptr<Model> m) {
        m->g.weight("big", DType::bf16, {8192, 4096});
        return m;
    };
    auto a = with_big(build(4, true)), b = with_big(build(64, true, false, true)), s = with_big(build(3, false, true));
    Plan pa = plan_of(*a), pb = plan_of(*b, Recompute::blocks), ps = plan_of(*s);
    SharedLayout L = make_shared_layout({&pa, &pb, &ps}, "cuda");
    CHECK(L.scratch_bytes == std::max({cuda_workspace_bytes(pa.graph), cuda_workspace_bytes(pb.graph), cuda_workspace_bytes(ps.graph)}));
    CHECK(L.unshared_bytes() >= L.total_bytes() + 2 * 64 * kMiB);
    {  // loads the kernels (lazy module loading takes device memory) before anything is measured
        auto warm = make_cuda_runtime(pa);
        write_persistent(*warm, *a);
        write_step_inputs(*warm, *a, 1);
        warm->run();
        warm->run();
        warm->synchronize();
    }

    const size_t used0 = device_bytes_in_use();
    auto mem = make_shared_memory(L);
    const size_t used1 = device_bytes_in_use();
    size_t allocated = mem->allocated_scratch();
    for (int c = 0; c < kCategoryCount; c++) {
        CHECK(mem->allocated_bytes(Category(c)) == L.arena_bytes[size_t(c)]);
        allocated += mem->allocated_bytes(Category(c));
    }
    CHECK(L.runtime_bytes == cuda_graph_bytes(pa.graph) + cuda_graph_bytes(pb.graph) + cuda_graph_bytes(ps.graph) +
                                 kCudaAllocationPage);
    CHECK(allocated == L.total_bytes() - L.runtime_bytes);
    // One allocation, mapped in pages of 2 MiB.
    CHECK(used1 - used0 >= allocated);
    CHECK(used1 - used0 <= allocated + kCudaAllocationPage);
    MESSAGE(L.report());

    auto ra = make_cuda_runtime(pa, mem), rb = make_cuda_runtime(pb, mem), rs = make_cuda_runtime(ps, mem);
    write_persistent(*ra, *a);
    rs->write_f32(s->extra, uniform(kIn * kIn, 5));
    for (int k = 0; k < 3; k++) {  // eager, captured, replayed
        write_step_inputs(*ra, *a, 10);
        ra->run();
        write_step_inputs(*rb, *b, 11);
        rb->run();
        write_step_inputs(*rs, *s, 12);
        rs->run();
    }
    CHECK(std::isfinite(ra->read_f32(a->loss)[0]));
    const size_t used2 = device_bytes_in_use();
    // The runtimes' graph executables are within the layout's runtime bytes.
    CHECK_MESSAGE(used2 - used0 <= L.total_bytes(), "runtimes on the shared memory took ", (used2 - used1) / kMiB,
                  " MiB beside it; the layout counts ", L.runtime_bytes / kMiB, " MiB");
    for (Runtime* r : {ra.get(), rb.get(), rs.get()})
        for (int c = 0; c < kCategoryCount; c++) CHECK(r->allocated_bytes(Category(c)) == L.arena_bytes[size_t(c)]);
    CHECK(ra->memory_report().find("shared memory (cuda, 3 plans") != std::string::npos);
}

TEST_CASE("CUDA shared memory: a memory serves only runtimes of its backend") {
    auto a = build(4, true);
    Plan pa = plan_of(*a);
    auto cpu_mem = make_shared_memory(make_shared_layout({&pa}, "cpu"));
    auto cuda_mem = make_shared_memory(make_shared_layout({&pa}, "cuda"));
    CHECK_THROWS_WITH_AS(make_cuda_runtime(pa, cpu_mem), doctest::Contains("is for cpu, not cuda"), Error);
    CHECK_THROWS_WITH_AS(make_cpu_runtime(pa, cuda_mem), doctest::Contains("is for cuda, not cpu"), Error);
}
