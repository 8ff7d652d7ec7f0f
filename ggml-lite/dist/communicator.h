// The communicator of a data-parallel run: one per rank (a process, or a thread of one in tests),
// joined to the others of its world. A step graph's all_reduce node (ops/dist.cpp) calls the one
// bound to its runtime (Runtime::set_communicator); the trainer uses it for the rank-0 duties'
// broadcasts and checks. Implementations: dist/local.h (threads of one process, sums on the CPU),
// dist/tcp.h (one process per rank over sockets, host memory), dist/nccl.h (libnccl loaded at run
// time, device memory on the runtime's stream).
//
// Every collective is entered by every rank in the same order. A rank that fails calls abort():
// the others' pending and later collectives throw CommError naming the rank and its reason, and no
// wait is without a time limit.
#pragma once
#include <cstddef>
#include <string>

#include "ggml-lite/core/error.h"

namespace gl::dist {

// A collective that cannot complete: a peer aborted or died, a wait timed out.
struct CommError : Error {
    using Error::Error;
};

class Communicator {
public:
    virtual ~Communicator() = default;
    virtual const char* name() const = 0;  // "local", "tcp", "nccl"
    virtual int rank() const = 0;
    virtual int world_size() const = 0;
    // true: all_reduce_sum takes device pointers and a CUDA stream (NCCL); false: host pointers,
    // and the call returns when the sum is there.
    virtual bool device_buffers() const { return false; }
    // data[0, n) = the sum over ranks of every rank's data[0, n), in place. With device buffers the
    // sum is enqueued on `stream` (a cudaStream_t); host ones ignore it. The order of the additions
    // is fixed (rank 0 + rank 1 + ...), so every rank gets the same bits.
    virtual void all_reduce_sum(float* data, size_t n, void* stream = nullptr) = 0;
    // bytes [0, n) of root's data copied into every rank's (host memory).
    virtual void broadcast(void* data, size_t n, int root) = 0;
    virtual void barrier() = 0;
    // Tells the others this rank is stopping, and why; later collectives on this rank throw.
    virtual void abort(const std::string& reason) = 0;
    // Throws the first collective failure this communicator met where it could not throw (a host
    // function on a CUDA stream); nothing when there was none.
    virtual void check() const = 0;
};

}  // namespace gl::dist
