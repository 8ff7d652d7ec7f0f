// Data parallelism's pieces: the launchers' rendezvous environment, the in-process and TCP
// communicators (the TCP one across real processes), the all_reduce op, and the step's gradient
// reduction: 2 ranks x batch B give the update of 1 rank x batch 2B, identical on both ranks.
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <thread>

#include "ggml-lite/core/autodiff.h"
#include "ggml-lite/core/planner.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/dist/local.h"
#include "ggml-lite/dist/nccl.h"
#include "ggml-lite/dist/rendezvous.h"
#include "ggml-lite/dist/shard.h"
#include "ggml-lite/dist/tcp.h"
#include "ggml-lite/ops/builder.h"
#include "train/update.h"

using namespace gl;
using namespace std::chrono_literals;

namespace {

dist::EnvLookup env_of(std::map<std::string, std::string> m) {
    return [m](const std::string& k) -> std::optional<std::string> {
        auto it = m.find(k);
        if (it == m.end()) return std::nullopt;
        return it->second;
    };
}

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

int free_port() { return dist::free_loopback_port(); }

}  // namespace

TEST_CASE("rendezvous: torchrun, Slurm and Open MPI environments") {
    dist::Rendezvous r = dist::rendezvous_from_env(env_of({}));
    CHECK(r.source == "none");
    CHECK(r.world_size == 1);

    r = dist::rendezvous_from_env(env_of({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"},
                                          {"MASTER_ADDR", "10.0.0.2"}, {"MASTER_PORT", "29501"}}));
    CHECK(r.source == "torchrun");
    CHECK(r.rank == 3);
    CHECK(r.world_size == 4);
    CHECK(r.local_rank == 1);
    CHECK(r.master_addr == "10.0.0.2");
    CHECK(r.master_port == 29501);

    r = dist::rendezvous_from_env(env_of({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"},
                                          {"SLURM_STEP_NODELIST", "gpu[07-08,11]"}}));
    CHECK(r.source == "slurm");
    CHECK(r.rank == 5);
    CHECK(r.local_rank == 1);
    CHECK(r.master_addr == "gpu07");
    CHECK(r.master_port == 29500);

    r = dist::rendezvous_from_env(env_of({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                                          {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"MASTER_ADDR", "h0"},
                                          {"MASTER_PORT", "1234"}}));
    CHECK(r.source == "mpi");
    CHECK(r.rank == 1);
    CHECK(r.master_addr == "h0");

    CHECK(dist::slurm_first_host("a01,b02") == "a01");
    CHECK(dist::slurm_first_host("node[3-5]") == "node3");
}

TEST_CASE("rendezvous: bad environments are named") {
    CHECK(error_of([] {
              dist::rendezvous_from_env(env_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"},
                                                {"MASTER_PORT", "1"}}));
          }).find("RANK=2 is outside [0, WORLD_SIZE=2)") != std::string::npos);
    CHECK(error_of([] { dist::rendezvous_from_env(env_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}})); })
              .find("needs MASTER_ADDR") != std::string::npos);
    CHECK(error_of([] {
              dist::rendezvous_from_env(env_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"},
                                                {"MASTER_PORT", "70000"}}));
          }).find("MASTER_PORT=70000 is outside 1..65535") != std::string::npos);
    CHECK(error_of([] { dist::rendezvous_from_env(env_of({{"RANK", "x"}, {"WORLD_SIZE", "2"}})); })
              .find("RANK=\"x\" is not an integer") != std::string::npos);
    CHECK(error_of([] { dist::rendezvous_from_env(env_of({{"OMPI_COMM_WORLD_RANK", "0"}})); })
              .find("OMPI_COMM_WORLD_SIZE is not set") != std::string::npos);
}

TEST_CASE("local communicator: sums in rank order, broadcast, abort and timeout") {
    dist::LocalWorld world(3, 5s);
    std::vector<std::vector<float>> bufs(3);
    std::vector<std::string> got(3);
    std::vector<std::thread> ts;
    for (int r = 0; r < 3; r++)
        ts.emplace_back([&, r] {
            dist::Communicator& c = world.rank(r);
            for (int round = 0; round < 20; round++) {
                bufs[size_t(r)] = {float(r + 1), float(round), 0.1f * float(r)};
                c.all_reduce_sum(bufs[size_t(r)].data(), 3);
            }
            std::string s = r == 2 ? "from two" : "--------";
            c.broadcast(s.data(), s.size(), 2);
            got[size_t(r)] = s;
            c.barrier();
        });
    for (auto& t : ts) t.join();
    for (int r = 0; r < 3; r++) {
        CHECK(bufs[size_t(r)][0] == 6.0f);
        CHECK(bufs[size_t(r)][1] == 57.0f);
        CHECK(bufs[size_t(r)][2] == (0.0f + 0.1f) + 0.2f);
        CHECK(got[size_t(r)] == "from two");
    }

    dist::LocalWorld w2(2, 5s);
    std::string err;
    std::thread t([&] { err = error_of([&] { w2.rank(1).barrier(); }); });
    w2.rank(0).abort("out of memory");
    t.join();
    CHECK(err.find("rank 0: out of memory") != std::string::npos);

    dist::LocalWorld w3(2, 100ms);
    CHECK(error_of([&] { w3.rank(0).barrier(); }).find("timed out") != std::string::npos);
}

TEST_CASE("tcp communicator: three processes sum, broadcast, and a killed rank is named without a hang") {
    const int port = free_port();
    auto rdv = [port](int rank, int world) {
        dist::Rendezvous r;
        r.source = "test";
        r.rank = rank;
        r.world_size = world;
        r.master_port = port;
        return r;
    };
    std::vector<pid_t> kids;
    for (int rank = 1; rank < 3; rank++) {
        const pid_t pid = ::fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            int rc = 0;
            try {
                auto c = dist::connect_tcp(rdv(rank, 3), 10s);
                std::vector<float> x = {float(rank), 1.0f};
                c->all_reduce_sum(x.data(), 2);
                if (x[0] != 3.0f || x[1] != 3.0f) rc = 2;
                char s[4] = "...";
                c->broadcast(s, 4, 0);
                if (std::strcmp(s, "abc") != 0) rc = 3;
                if (rank == 2) ::_exit(rc);  // dies before the next collective
                c->barrier();               // rank 0 stops it with an error
                rc = 4;
            } catch (const dist::CommError&) {
            } catch (...) {
                rc = 5;
            }
            ::_exit(rc);
        }
        kids.push_back(pid);
    }
    auto c = dist::connect_tcp(rdv(0, 3), 10s);
    CHECK(c->world_size() == 3);
    std::vector<float> x = {0.0f, 1.0f};
    c->all_reduce_sum(x.data(), 2);
    CHECK(x[0] == 3.0f);
    CHECK(x[1] == 3.0f);
    char s[4] = "abc";
    c->broadcast(s, 4, 0);
    const auto t0 = std::chrono::steady_clock::now();
    const std::string err = error_of([&] { c->barrier(); });
    CHECK(err.find("rank 2 closed its connection") != std::string::npos);
    CHECK(std::chrono::steady_clock::now() - t0 < 5s);
    c->abort("rank 2 died");
    for (pid_t pid : kids) {
        int status = 0;
        ::waitpid(pid, &status, 0);
        CHECK(WIFEXITED(status));
        CHECK(WEXITSTATUS(status) == 0);
    }
}

TEST_CASE("tcp communicator: rank 0 alone times out naming how many ranks joined") {
    dist::Rendezvous r;
    r.rank = 0;
    r.world_size = 2;
    r.master_port = free_port();
    CHECK(error_of([&] { dist::connect_tcp(r, 200ms); }).find("0 of 1 ranks joined") != std::string::npos);
}

namespace {

// A linear model y = x w^T with an MSE loss and AdamW; returns w after `steps` updates of the
// batch rows [first, first + rows) of every step's global batch.
struct Linear {
    Graph g;
    ValueId x, t, w;
    std::unique_ptr<train::Update> up;
    std::unique_ptr<Runtime> rt;
    Linear(int64_t batch, bool reduce) {
        x = g.input("x", DType::f32, {batch, 8});
        t = g.input("t", DType::f32, {batch, 4});
        w = g.param("w", DType::f32, {4, 8});
        const ValueId loss = mse_loss(g, linear(g, x, w), t);
        Gradients grads = backward(g, loss);
        up = std::make_unique<train::Update>(
            g, std::vector<train::ParamGroup>{{"unet", {w}, {grads[w]}, 1e-2f, {}}}, optim::OptimizerConfig{}, 1.0f, 1,
            kNoValue, loss, reduce);
        rt = make_runtime(make_plan(g), Backend::cpu);
        std::vector<float> w0(32);
        for (size_t i = 0; i < w0.size(); i++) w0[i] = 0.05f * float(int(i % 7) - 3);
        rt->write_f32(w, w0);
        up->init_state(*rt);
    }
    std::vector<float> train(const std::vector<std::vector<float>>& xs, const std::vector<std::vector<float>>& ts,
                             int64_t first, int64_t rows, float share) {
        if (up->reduces()) up->set_share(*rt, share);
        for (size_t s = 0; s < xs.size(); s++) {
            rt->write_f32(x, std::vector<float>(xs[s].begin() + first * 8, xs[s].begin() + (first + rows) * 8));
            rt->write_f32(t, std::vector<float>(ts[s].begin() + first * 4, ts[s].begin() + (first + rows) * 4));
            up->prepare(*rt, 0);
            rt->run();
            CHECK(up->finish_run(*rt, true).applied);
        }
        return rt->read_f32(w);
    }
};

}  // namespace

TEST_CASE("data-parallel update: 2 ranks x batch 2 apply 1 rank x batch 4's update, identical on both ranks") {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<std::vector<float>> xs(5), ts(5);
    for (int s = 0; s < 5; s++) {
        for (int i = 0; i < 32; i++) xs[size_t(s)].push_back(u(rng));
        for (int i = 0; i < 16; i++) ts[size_t(s)].push_back(u(rng));
    }
    Linear one(4, false);
    const std::vector<float> ref = one.train(xs, ts, 0, 4, 1.0f);

    dist::LocalWorld world(2, 10s);
    std::vector<std::vector<float>> got(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; r++)
        threads.emplace_back([&, r] {
            Linear m(2, true);
            m.rt->set_communicator(&world.rank(r));
            got[size_t(r)] = m.train(xs, ts, 2 * r, 2, 0.5f);
        });
    for (auto& th : threads) th.join();
    REQUIRE(got[0].size() == ref.size());
    CHECK(std::memcmp(got[0].data(), got[1].data(), got[0].size() * sizeof(float)) == 0);
    double worst = 0;
    for (size_t i = 0; i < ref.size(); i++) worst = std::max(worst, double(std::fabs(got[0][i] - ref[i])));
    CHECK(worst < 1e-5);
    // The reduction matters: one rank's half alone moves w elsewhere.
    Linear half(2, false);
    const std::vector<float> alone = half.train(xs, ts, 0, 2, 1.0f);
    double diff = 0;
    for (size_t i = 0; i < ref.size(); i++) diff = std::max(diff, double(std::fabs(alone[i] - ref[i])));
    CHECK(diff > 1e-4);
}

TEST_CASE("data-parallel update: a NaN on one rank skips the step on every rank") {
    dist::LocalWorld world(2, 10s);
    std::vector<int> applied(2, -1);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; r++)
        threads.emplace_back([&, r] {
            Linear m(2, true);
            m.rt->set_communicator(&world.rank(r));
            m.up->set_share(*m.rt, 0.5f);
            std::vector<float> xv(16, 0.5f);
            if (r == 1) xv[3] = std::nanf("");
            m.rt->write_f32(m.x, xv);
            m.rt->write_f32(m.t, std::vector<float>(8, 0.0f));
            m.up->prepare(*m.rt, 0);
            m.rt->run();
            applied[size_t(r)] = m.up->finish_run(*m.rt, true).applied ? 1 : 0;
        });
    for (auto& th : threads) th.join();
    CHECK(applied[0] == 0);
    CHECK(applied[1] == 0);
}

TEST_CASE("nccl communicator: a library that is not there is a clear error, and multicast stays off") {
    // nccl() loads once per process: this case is its only caller in the suite.
    ::setenv("GL_NCCL_LIBRARY", "/nonexistent/libnccl.so.2", 1);
    ::setenv("NCCL_NVLS_ENABLE", "1", 1);
    dist::Rendezvous r;
    const std::string err = error_of([&] { dist::connect_nccl(dist::connect_tcp(r)); });
    CHECK(err.find("cannot load NCCL (/nonexistent/libnccl.so.2)") != std::string::npos);
    CHECK(err.find("--dist_backend tcp") != std::string::npos);
    CHECK(std::string(std::getenv("NCCL_NVLS_ENABLE")) == "0");
    ::unsetenv("GL_NCCL_LIBRARY");
}

TEST_CASE("sharding: contiguous slices of the global batch, even splits of a short one, kohya's step counts") {
    // 2 ranks x batch 4 = the 8 images of 1 x batch 8.
    CHECK(dist::shard_of(8, 2, 0).begin == 0);
    CHECK(dist::shard_of(8, 2, 1).begin == 4);
    CHECK(dist::shard_of(8, 2, 1).count == 4);
    CHECK(dist::shard_of(8, 2, 1).share == 0.5f);
    // A last global batch of 5 over 3 ranks: 2, 2, 1, covering [0, 5) once.
    int64_t next = 0;
    float shares = 0;
    for (int r = 0; r < 3; r++) {
        const dist::Shard s = dist::shard_of(5, 3, r);
        CHECK(s.begin == next);
        next += s.count;
        shares += s.share;
        CHECK(s.count == (r < 2 ? 2 : 1));
    }
    CHECK(next == 5);
    CHECK(shares == doctest::Approx(1.0));
    // Fewer images than ranks: the last rank joins with none and weight 0.
    CHECK(dist::shard_of(1, 2, 1).count == 0);
    CHECK(dist::shard_of(1, 2, 1).share == 0.0f);
    CHECK(dist::effective_batch(4, 2, 3) == 24);
    CHECK(dist::updates_per_epoch(17, 2, 1) == 9);
    CHECK(dist::updates_per_epoch(17, 2, 4) == 3);
    CHECK(dist::updates_per_epoch(16, 1, 1) == 16);
    CHECK(error_of([] { dist::shard_of(4, 2, 2); }).find("rank 2 outside a world of 2") != std::string::npos);
}
