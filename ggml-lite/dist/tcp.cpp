#include "ggml-lite/dist/tcp.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace gl::dist {
namespace {

using Clock = std::chrono::steady_clock;

enum : uint32_t { kData = 1, kAbort = 2 };
struct Header {
    uint32_t kind, rank;
    uint64_t bytes;
};

class TcpComm final : public Communicator {
public:
    TcpComm(const Rendezvous& r, std::chrono::milliseconds timeout) : rank_(r.rank), world_(r.world_size), timeout_(timeout) {
        peers_.assign(size_t(world_), -1);
        if (world_ == 1) return;
        if (rank_ == 0) accept_all(r); else connect_master(r);
    }
    ~TcpComm() override {
        for (int fd : peers_)
            if (fd >= 0) ::close(fd);
    }
    const char* name() const override { return "tcp"; }
    int rank() const override { return rank_; }
    int world_size() const override { return world_; }

    void all_reduce_sum(float* data, size_t n, void*) override {
        if (world_ == 1) return;
        guard();
        const size_t bytes = n * sizeof(float);
        try {
            if (rank_ == 0) {
                std::vector<float> in(n);
                for (int p = 1; p < world_; p++) {  // rank order: the same bits on every rank
                    recv_msg(p, in.data(), bytes);
                    for (size_t i = 0; i < n; i++) data[i] += in[i];
                }
                for (int p = 1; p < world_; p++) send_msg(p, kData, data, bytes);
            } else {
                send_msg(0, kData, data, bytes);
                recv_msg(0, data, bytes);
            }
        } catch (const CommError& e) {
            failed_ = e.what();
            throw;
        }
    }
    void broadcast(void* data, size_t n, int root) override {
        GL_CHECK(root >= 0 && root < world_, "broadcast: root ", root, " outside a world of ", world_);
        if (world_ == 1) return;
        guard();
        try {
            if (root != 0) {  // through rank 0
                if (rank_ == root) send_msg(0, kData, data, n);
                if (rank_ == 0) recv_msg(root, data, n);
            }
            if (rank_ == 0) {
                for (int p = 1; p < world_; p++)
                    if (p != root) send_msg(p, kData, data, n);
            } else if (rank_ != root) {
                recv_msg(0, data, n);
            }
        } catch (const CommError& e) {
            failed_ = e.what();
            throw;
        }
    }
    void barrier() override {
        float x = 0;
        all_reduce_sum(&x, 1, nullptr);
    }
    void abort(const std::string& reason) override {
        if (!failed_.empty() && aborted_) return;
        aborted_ = true;
        if (failed_.empty()) failed_ = "rank " + std::to_string(rank_) + " aborted: " + reason;
        for (int p = 0; p < world_; p++)
            if (peers_[size_t(p)] >= 0) {
                Header h{kAbort, uint32_t(rank_), reason.size()};
                // Best effort, without waiting: the peer may be gone.
                (void)::send(peers_[size_t(p)], &h, sizeof h, MSG_NOSIGNAL | MSG_DONTWAIT);
                (void)::send(peers_[size_t(p)], reason.data(), reason.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
            }
    }
    void check() const override {
        if (!failed_.empty()) throw CommError("tcp communicator (rank " + std::to_string(rank_) + "): " + failed_);
    }

private:
    [[noreturn]] void fail(const std::string& why) {
        failed_ = why;
        throw CommError("tcp communicator (rank " + std::to_string(rank_) + "): " + why);
    }
    void guard() const { check(); }

    // Waits for fd to be ready (POLLIN / POLLOUT) until the deadline.
    void wait_fd(int fd, short what, Clock::time_point deadline, int peer) {
        for (;;) {
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
            if (left <= 0)
                fail("timed out after " + std::to_string(timeout_.count()) + " ms waiting for rank " + std::to_string(peer));
            pollfd p{fd, what, 0};
            const int rc = ::poll(&p, 1, int(std::min<long long>(left, 1000)));
            if (rc > 0) return;
            if (rc < 0 && errno != EINTR) fail(std::string("poll: ") + std::strerror(errno));
        }
    }
    void send_all(int peer, const void* data, size_t n, Clock::time_point deadline) {
        const char* p = static_cast<const char*>(data);
        while (n > 0) {
            wait_fd(peers_[size_t(peer)], POLLOUT, deadline, peer);
            const ssize_t k = ::send(peers_[size_t(peer)], p, n, MSG_NOSIGNAL);
            if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
            if (k <= 0) fail("rank " + std::to_string(peer) + " closed its connection (it stopped or died)");
            p += k;
            n -= size_t(k);
        }
    }
    void recv_all(int peer, void* data, size_t n, Clock::time_point deadline) {
        char* p = static_cast<char*>(data);
        while (n > 0) {
            wait_fd(peers_[size_t(peer)], POLLIN, deadline, peer);
            const ssize_t k = ::recv(peers_[size_t(peer)], p, n, 0);
            if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
            if (k <= 0) fail("rank " + std::to_string(peer) + " closed its connection (it stopped or died)");
            p += k;
            n -= size_t(k);
        }
    }
    void send_msg(int peer, uint32_t kind, const void* data, size_t n) {
        const auto deadline = Clock::now() + timeout_;
        Header h{kind, uint32_t(rank_), n};
        send_all(peer, &h, sizeof h, deadline);
        send_all(peer, data, n, deadline);
    }
    void recv_msg(int peer, void* data, size_t n) {
        const auto deadline = Clock::now() + timeout_;
        Header h{};
        recv_all(peer, &h, sizeof h, deadline);
        if (h.kind == kAbort) {
            std::string why(size_t(std::min<uint64_t>(h.bytes, 4096)), '\0');
            try {
                recv_all(peer, why.data(), why.size(), Clock::now() + std::chrono::seconds(1));
            } catch (const CommError&) {
            }
            fail("rank " + std::to_string(h.rank) + " aborted: " + why);
        }
        if (h.kind != kData || h.bytes != n)
            fail("rank " + std::to_string(peer) + " sent " + std::to_string(h.bytes) + " bytes where " +
                 std::to_string(n) + " were expected (the ranks disagree on the step)");
        recv_all(peer, data, n, deadline);
    }

    static void tune(int fd) {
        int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    sockaddr_in resolve(const Rendezvous& r) {
        addrinfo hints{}, *res = nullptr;
        hints.ai_family = AF_INET;
        hints.ai_socktype = SOCK_STREAM;
        const int rc = ::getaddrinfo(r.master_addr.c_str(), nullptr, &hints, &res);
        if (rc != 0 || !res) fail("cannot resolve the master address \"" + r.master_addr + "\": " + ::gai_strerror(rc));
        sockaddr_in a = *reinterpret_cast<sockaddr_in*>(res->ai_addr);
        ::freeaddrinfo(res);
        a.sin_port = htons(uint16_t(r.master_port));
        return a;
    }
    void accept_all(const Rendezvous& r) {
        const int ls = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (ls < 0) fail(std::string("socket: ") + std::strerror(errno));
        int one = 1;
        ::setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_ANY);
        a.sin_port = htons(uint16_t(r.master_port));
        if (::bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(ls, world_) != 0) {
            const std::string e = std::strerror(errno);
            ::close(ls);
            fail("rank 0 cannot listen on port " + std::to_string(r.master_port) + ": " + e);
        }
        const auto deadline = Clock::now() + timeout_;
        int joined = 0;
        while (joined < world_ - 1) {
            try {
                wait_fd(ls, POLLIN, deadline, -1);
            } catch (const CommError&) {
                ::close(ls);
                fail("timed out after " + std::to_string(timeout_.count()) + " ms: " + std::to_string(joined) + " of " +
                     std::to_string(world_ - 1) + " ranks joined on port " + std::to_string(r.master_port));
            }
            const int fd = ::accept4(ls, nullptr, nullptr, SOCK_CLOEXEC);
            if (fd < 0) continue;
            tune(fd);
            int32_t hello[2] = {0, 0};  // rank, world size
            peers_[0] = fd;               // recv_all reads peers_[peer]
            try {
                recv_all(0, hello, sizeof hello, Clock::now() + timeout_);
            } catch (const CommError&) {
                ::close(fd);
                peers_[0] = -1;
                failed_.clear();
                continue;
            }
            peers_[0] = -1;
            if (hello[1] != world_ || hello[0] <= 0 || hello[0] >= world_ || peers_[size_t(hello[0])] >= 0) {
                ::close(fd);
                ::close(ls);
                fail("a process joined as rank " + std::to_string(hello[0]) + " of " + std::to_string(hello[1]) +
                     " where rank 0 runs a world of " + std::to_string(world_));
            }
            peers_[size_t(hello[0])] = fd;
            joined++;
        }
        ::close(ls);
    }
    void connect_master(const Rendezvous& r) {
        const sockaddr_in a = resolve(r);
        const auto deadline = Clock::now() + timeout_;
        for (;;) {
            const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            if (fd < 0) fail(std::string("socket: ") + std::strerror(errno));
            if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0) {
                tune(fd);
                peers_[0] = fd;
                break;
            }
            ::close(fd);
            if (Clock::now() >= deadline)
                fail("timed out after " + std::to_string(timeout_.count()) + " ms connecting to rank 0 at " +
                     r.master_addr + ":" + std::to_string(r.master_port));
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        const int32_t hello[2] = {rank_, world_};
        send_all(0, hello, sizeof hello, Clock::now() + timeout_);
    }

    int rank_, world_;
    std::chrono::milliseconds timeout_;
    std::vector<int> peers_;  // rank 0: a socket per rank; the others: peers_[0]
    std::string failed_;
    bool aborted_ = false;
};

}  // namespace

std::unique_ptr<Communicator> connect_tcp(const Rendezvous& r, std::chrono::milliseconds timeout) {
    GL_CHECK(r.world_size >= 1 && r.rank >= 0 && r.rank < r.world_size, "tcp communicator: rank ", r.rank,
             " outside a world of ", r.world_size);
    return std::make_unique<TcpComm>(r, timeout);
}

}  // namespace gl::dist
