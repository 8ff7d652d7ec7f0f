// The in-process communicator: the ranks are threads of one process (tests, and a CPU run's
// sharding checks), each holding its own Communicator from one LocalWorld. Sums are on the CPU,
// in rank order (rank 0 + rank 1 + ...), so every rank gets the same bits whatever the thread
// timing. Every wait is bounded (timeout); an abort reaches every rank's current and later calls.
#pragma once
#include <chrono>
#include <memory>
#include <vector>

#include "ggml-lite/dist/communicator.h"

namespace gl::dist {

class LocalWorld {
public:
    explicit LocalWorld(int world_size, std::chrono::milliseconds timeout = std::chrono::seconds(60));
    ~LocalWorld();
    int world_size() const;
    // Rank r's communicator (owned by the world; one thread uses it at a time).
    Communicator& rank(int r);

    struct State;

private:
    std::shared_ptr<State> state_;
    std::vector<std::unique_ptr<Communicator>> ranks_;
};

}  // namespace gl::dist
