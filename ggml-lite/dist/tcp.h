// The TCP communicator: one process per rank, host memory, sockets in a star around rank 0
// (which listens on the rendezvous' master address and port; the others connect, retrying until
// the timeout). all_reduce_sum: every rank sends its buffer to rank 0, which adds them in rank
// order and sends the sum back, so every rank gets the same bits. Works with the CPU backend and
// with several processes on one GPU (through host copies). Every socket wait is bounded by the
// timeout; a peer that closes its connection (died) or sends an abort makes every later call throw
// CommError naming that rank.
#pragma once
#include <chrono>
#include <memory>

#include "ggml-lite/dist/communicator.h"
#include "ggml-lite/dist/rendezvous.h"

namespace gl::dist {

std::unique_ptr<Communicator> connect_tcp(const Rendezvous& r,
                                          std::chrono::milliseconds timeout = std::chrono::seconds(120));

}  // namespace gl::dist
