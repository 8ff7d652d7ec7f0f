#include "ggml-lite/dist/local.h"

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>

namespace gl::dist {

// One collective at a time: every rank posts its buffer, the last to arrive combines them, and
// every rank leaves once it has read the result (generation counts separate one call from the next).
struct LocalWorld::State {
    int world;
    std::chrono::milliseconds timeout;
    std::mutex mu;
    std::condition_variable cv;
    std::vector<void*> bufs;
    int arrived = 0, left = 0;
    uint64_t generation = 0;
    std::string aborted;  // "rank r: reason" once a rank aborted
};

namespace {

class LocalComm final : public Communicator {
public:
    LocalComm(std::shared_ptr<LocalWorld::State> s, int rank) : s_(std::move(s)), rank_(rank) {}
    const char* name() const override { return "local"; }
    int rank() const override { return rank_; }
    int world_size() const override { return s_->world; }

    void all_reduce_sum(float* data, size_t n, void*) override {
        collective(data, [n](std::vector<void*>& bufs) {
            float* out = static_cast<float*>(bufs[0]);
            for (size_t r = 1; r < bufs.size(); r++) {
                const float* in = static_cast<const float*>(bufs[r]);
                for (size_t i = 0; i < n; i++) out[i] += in[i];
            }
            for (size_t r = 1; r < bufs.size(); r++) std::memcpy(bufs[r], out, n * sizeof(float));
        });
    }
    void broadcast(void* data, size_t n, int root) override {
        GL_CHECK(root >= 0 && root < s_->world, "broadcast: root ", root, " outside a world of ", s_->world);
        collective(data, [n, root](std::vector<void*>& bufs) {
            for (size_t r = 0; r < bufs.size(); r++)
                if (int(r) != root) std::memcpy(bufs[r], bufs[size_t(root)], n);
        });
    }
    void barrier() override {
        collective(nullptr, [](std::vector<void*>&) {});
    }
    void abort(const std::string& reason) override {
        std::lock_guard<std::mutex> lock(s_->mu);
        if (s_->aborted.empty()) s_->aborted = "rank " + std::to_string(rank_) + ": " + reason;
        s_->cv.notify_all();
    }
    void check() const override {}

private:
    template <class Combine>
    void collective(void* buf, Combine&& combine) {
        std::unique_lock<std::mutex> lock(s_->mu);
        fail_if_aborted();
        // Wait for the previous collective to be left by every rank.
        wait(lock, [&] { return s_->left == 0 || !s_->aborted.empty(); });
        const uint64_t gen = s_->generation;
        s_->bufs[size_t(rank_)] = buf;
        if (++s_->arrived == s_->world) {
            combine(s_->bufs);
            s_->arrived = 0;
            s_->left = s_->world;
            s_->generation++;
            s_->cv.notify_all();
        } else {
            wait(lock, [&] { return s_->generation != gen || !s_->aborted.empty(); });
        }
        fail_if_aborted();
        if (--s_->left == 0) s_->cv.notify_all();
    }
    template <class Pred>
    void wait(std::unique_lock<std::mutex>& lock, Pred&& pred) {
        if (!s_->cv.wait_for(lock, s_->timeout, pred)) {
            s_->aborted = "rank " + std::to_string(rank_) + ": timed out after " +
                          std::to_string(s_->timeout.count()) + " ms waiting for the other ranks";
            s_->cv.notify_all();
        }
    }
    void fail_if_aborted() const {
        if (!s_->aborted.empty()) throw CommError("local communicator (rank " + std::to_string(rank_) + "): " + s_->aborted);
    }
    std::shared_ptr<LocalWorld::State> s_;
    int rank_;
};

}  // namespace

LocalWorld::LocalWorld(int world_size, std::chrono::milliseconds timeout) : state_(std::make_shared<State>()) {
    GL_CHECK(world_size >= 1, "local communicator: world size must be >= 1, got ", world_size);
    state_->world = world_size;
    state_->timeout = timeout;
    state_->bufs.assign(size_t(world_size), nullptr);
    for (int r = 0; r < world_size; r++) ranks_.push_back(std::make_unique<LocalComm>(state_, r));
}
LocalWorld::~LocalWorld() = default;
int LocalWorld::world_size() const { return state_->world; }
Communicator& LocalWorld::rank(int r) {
    GL_CHECK(r >= 0 && r < state_->world, "local communicator: rank ", r, " outside a world of ", state_->world);
    return *ranks_[size_t(r)];
}

}  // namespace gl::dist
