// Data parallelism on the GPU: NCCL at world size 1 (the one-GPU machine: NCCL refuses two ranks on
// one GPU) and two processes on one GPU over the TCP communicator, whose all_reduce goes through a
// pinned copy and a host function on the stream, the second run replayed from the captured graph.
// The second process is this binary again (fork + exec: a CUDA context does not survive fork),
// told its rank by GL_TEST_DIST_RANK.
#include <doctest/doctest.h>
#include <cuda_runtime.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "ggml-lite/core/autodiff.h"
#include "ggml-lite/core/planner.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/dist/nccl.h"
#include "ggml-lite/dist/rendezvous.h"
#include "ggml-lite/dist/tcp.h"
#include "ggml-lite/ops/builder.h"
#include "train/update.h"

using namespace gl;
using namespace std::chrono_literals;

TEST_CASE("dist gpu: NCCL at world size 1 sums device memory on a stream") {
    const std::string why = dist::nccl_unavailable();
    if (!why.empty()) {
        MESSAGE("NCCL not available, case skipped: ", why);
        return;
    }
    auto c = dist::connect_nccl(dist::connect_tcp(dist::Rendezvous{}));
    CHECK(std::string(std::getenv("NCCL_NVLS_ENABLE")) == "0");
    CHECK(c->device_buffers());
    float* d = nullptr;
    REQUIRE(cudaMalloc(&d, 1000 * sizeof(float)) == cudaSuccess);
    std::vector<float> h(1000), back(1000);
    for (size_t i = 0; i < h.size(); i++) h[i] = 0.25f * float(i);
    cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice);
    cudaStream_t s;
    cudaStreamCreate(&s);
    c->all_reduce_sum(d, h.size(), s);
    cudaStreamSynchronize(s);
    cudaMemcpy(back.data(), d, h.size() * sizeof(float), cudaMemcpyDeviceToHost);
    CHECK(back == h);
    cudaStreamDestroy(s);
    cudaFree(d);
}

namespace {

// y = x w^T, MSE, AdamW, reduced over the communicator; rows [first, first + 2) of each batch of 4.
std::vector<float> train_linear(Backend b, dist::Communicator* comm, int64_t first, int64_t rows, float share) {
    Graph g;
    const ValueId x = g.input("x", DType::f32, {rows, 8}), t = g.input("t", DType::f32, {rows, 4});
    const ValueId w = g.param("w", DType::f32, {4, 8});
    const ValueId loss = mse_loss(g, linear(g, x, w), t);
    Gradients grads = backward(g, loss);
    train::Update up(g, {{"unet", {w}, {grads[w]}, 1e-2f, {}}}, optim::OptimizerConfig{}, 1.0f, 1, kNoValue, loss,
                     comm != nullptr);
    auto rt = make_runtime(make_plan(g), b);
    rt->set_communicator(comm);
    std::vector<float> w0(32);
    for (size_t i = 0; i < w0.size(); i++) w0[i] = 0.05f * float(int(i % 7) - 3);
    rt->write_f32(w, w0);
    up.init_state(*rt);
    if (comm) up.set_share(*rt, share);
    for (int s = 0; s < 4; s++) {
        std::vector<float> xs(32), ts(16);
        for (size_t i = 0; i < xs.size(); i++) xs[i] = std::sin(0.3f * float(i) + float(s));
        for (size_t i = 0; i < ts.size(); i++) ts[i] = std::cos(0.7f * float(i) - float(s));
        rt->write_f32(x, std::vector<float>(xs.begin() + first * 8, xs.begin() + (first + rows) * 8));
        rt->write_f32(t, std::vector<float>(ts.begin() + first * 4, ts.begin() + (first + rows) * 4));
        up.prepare(*rt, 0);
        rt->run();
        CHECK(up.finish_run(*rt, true).applied);
        if (comm) comm->check();
    }
    return rt->read_f32(w);
}

}  // namespace

TEST_CASE("dist gpu: two processes on one GPU over tcp give one process' batch of 4, bit-identical ranks") {
    const char* as_rank = std::getenv("GL_TEST_DIST_RANK");
    const int rank = as_rank ? std::atoi(as_rank) : 0;
    int port = 0;
    pid_t child = -1;
    if (rank == 0) {
        port = gl::dist::free_loopback_port();
        child = ::fork();
        REQUIRE(child >= 0);
        if (child == 0) {
            ::setenv("GL_TEST_DIST_RANK", "1", 1);
            ::setenv("GL_TEST_DIST_PORT", std::to_string(port).c_str(), 1);
            ::execl("/proc/self/exe", "gl-gpu-tests",
                    "--test-case=dist gpu: two processes on one GPU over tcp*", "--no-intro", nullptr);
            ::_exit(127);
        }
    } else {
        port = std::atoi(std::getenv("GL_TEST_DIST_PORT"));
    }
    dist::Rendezvous r;
    r.rank = rank;
    r.world_size = 2;
    r.master_port = port;
    auto comm = dist::connect_tcp(r, 60s);
    const std::vector<float> w = train_linear(Backend::cuda, comm.get(), 2 * rank, 2, 0.5f);
    std::vector<float> w0 = w;
    comm->broadcast(w0.data(), w0.size() * sizeof(float), 0);
    CHECK(std::memcmp(w0.data(), w.data(), w.size() * sizeof(float)) == 0);
    if (rank == 0) {
        const std::vector<float> ref = train_linear(Backend::cpu, nullptr, 0, 4, 1.0f);
        for (size_t i = 0; i < ref.size(); i++) CHECK(w[i] == doctest::Approx(ref[i]).epsilon(1e-4));
        int status = 0;
        ::waitpid(child, &status, 0);
        CHECK(WIFEXITED(status));
        CHECK(WEXITSTATUS(status) == 0);
    }
}
