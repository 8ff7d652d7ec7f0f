#include "ggml-lite/dist/nccl.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <string>

namespace gl::dist {
namespace {

// The few NCCL entry points used, by their C signatures (nccl.h: ncclResult_t is an int enum,
// ncclUniqueId 128 bytes, ncclFloat32 = 7, ncclSum = 0).
struct NcclUniqueId {
    char internal[128];
};
using Comm = void*;
constexpr int kFloat32 = 7, kSum = 0;
struct Nccl {
    void* lib = nullptr;
    std::string error;
    int (*get_unique_id)(NcclUniqueId*) = nullptr;
    int (*comm_init_rank)(Comm*, int, NcclUniqueId, int) = nullptr;
    int (*all_reduce)(const void*, void*, size_t, int, int, Comm, void*) = nullptr;
    int (*comm_abort)(Comm) = nullptr;
    int (*comm_destroy)(Comm) = nullptr;
    const char* (*error_string)(int) = nullptr;
};

Nccl& nccl() {
    static Nccl n;
    static std::once_flag once;
    std::call_once(once, [] {
        const char* name = std::getenv("GL_NCCL_LIBRARY");
        const std::string file = name && *name ? name : "libnccl.so.2";
        n.lib = ::dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!n.lib) {
            const char* e = ::dlerror();
            n.error = "cannot load NCCL (" + file + "): " + (e ? e : "unknown error") +
                      "; install NCCL, name it with GL_NCCL_LIBRARY, or use --dist_backend tcp";
            return;
        }
        auto sym = [&](const char* s) {
            void* p = ::dlsym(n.lib, s);
            if (!p && n.error.empty()) n.error = file + " has no " + s;
            return p;
        };
        n.get_unique_id = reinterpret_cast<decltype(n.get_unique_id)>(sym("ncclGetUniqueId"));
        n.comm_init_rank = reinterpret_cast<decltype(n.comm_init_rank)>(sym("ncclCommInitRank"));
        n.all_reduce = reinterpret_cast<decltype(n.all_reduce)>(sym("ncclAllReduce"));
        n.comm_abort = reinterpret_cast<decltype(n.comm_abort)>(sym("ncclCommAbort"));
        n.comm_destroy = reinterpret_cast<decltype(n.comm_destroy)>(sym("ncclCommDestroy"));
        n.error_string = reinterpret_cast<decltype(n.error_string)>(sym("ncclGetErrorString"));
    });
    return n;
}

class NcclComm final : public Communicator {
public:
    explicit NcclComm(std::unique_ptr<Communicator> boot) : boot_(std::move(boot)) {
        Nccl& n = nccl();
        NcclUniqueId id{};
        if (boot_->rank() == 0) call(n.get_unique_id(&id), "ncclGetUniqueId");
        boot_->broadcast(&id, sizeof id, 0);
        call(n.comm_init_rank(&comm_, boot_->world_size(), id, boot_->rank()), "ncclCommInitRank");
    }
    ~NcclComm() override {
        if (comm_) nccl().comm_destroy(comm_);
    }
    const char* name() const override { return "nccl"; }
    int rank() const override { return boot_->rank(); }
    int world_size() const override { return boot_->world_size(); }
    bool device_buffers() const override { return true; }
    void all_reduce_sum(float* data, size_t n, void* stream) override {
        call(nccl().all_reduce(data, data, n, kFloat32, kSum, comm_, stream), "ncclAllReduce");
    }
    void broadcast(void* data, size_t n, int root) override { boot_->broadcast(data, n, root); }
    void barrier() override { boot_->barrier(); }
    void abort(const std::string& reason) override {
        boot_->abort(reason);
        if (comm_) {
            nccl().comm_abort(comm_);
            comm_ = nullptr;
        }
    }
    void check() const override { boot_->check(); }

private:
    void call(int rc, const char* what) {
        if (rc != 0)
            throw CommError("nccl communicator (rank " + std::to_string(boot_->rank()) + "): " + what + ": " +
                            nccl().error_string(rc));
    }
    std::unique_ptr<Communicator> boot_;
    Comm comm_ = nullptr;
};

}  // namespace

void disable_nvls() { ::setenv("NCCL_NVLS_ENABLE", "0", 1); }

std::string nccl_unavailable() { return nccl().error; }

std::unique_ptr<Communicator> connect_nccl(std::unique_ptr<Communicator> bootstrap) {
    GL_CHECK(bootstrap, "nccl communicator: no bootstrap communicator");
    disable_nvls();
    const std::string why = nccl_unavailable();
    if (!why.empty()) throw CommError(why);
    return std::make_unique<NcclComm>(std::move(bootstrap));
}

}  // namespace gl::dist
