#include "ggml-lite/dist/rendezvous.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>

#include "ggml-lite/core/error.h"

namespace gl::dist {

EnvLookup process_env() {
    return [](const std::string& k) -> std::optional<std::string> {
        const char* v = std::getenv(k.c_str());
        if (!v) return std::nullopt;
        return std::string(v);
    };
}

namespace {

int parse_int(const EnvLookup& env, const std::string& key, const std::string& launcher) {
    const std::optional<std::string> v = env(key);
    GL_CHECK(v.has_value(), "rendezvous (", launcher, "): ", key, " is not set");
    errno = 0;
    char* end = nullptr;
    const long x = std::strtol(v->c_str(), &end, 10);
    GL_CHECK(!v->empty() && end && *end == '\0' && errno == 0 && x >= INT_MIN && x <= INT_MAX,
             "rendezvous (", launcher, "): ", key, "=\"", *v, "\" is not an integer");
    return int(x);
}

}  // namespace

std::string slurm_first_host(const std::string& nodelist) {
    std::string out;
    for (size_t i = 0; i < nodelist.size(); i++) {
        const char c = nodelist[i];
        if (c == ',') break;
        if (c == '[') {  // the first number of the range list
            for (size_t j = i + 1; j < nodelist.size() && nodelist[j] != '-' && nodelist[j] != ',' && nodelist[j] != ']'; j++)
                out += nodelist[j];
            break;
        }
        out += c;
    }
    return out;
}

Rendezvous rendezvous_from_env(const EnvLookup& env) {
    Rendezvous r;
    std::string rank_key, size_key, local_key;
    if (env("RANK")) {
        r.source = "torchrun";
        rank_key = "RANK", size_key = "WORLD_SIZE", local_key = "LOCAL_RANK";
    } else if (env("SLURM_PROCID")) {
        r.source = "slurm";
        rank_key = "SLURM_PROCID", size_key = "SLURM_NTASKS", local_key = "SLURM_LOCALID";
    } else if (env("OMPI_COMM_WORLD_RANK")) {
        r.source = "mpi";
        rank_key = "OMPI_COMM_WORLD_RANK", size_key = "OMPI_COMM_WORLD_SIZE", local_key = "OMPI_COMM_WORLD_LOCAL_RANK";
    } else {
        return r;
    }
    r.rank = parse_int(env, rank_key, r.source);
    r.world_size = parse_int(env, size_key, r.source);
    r.local_rank = env(local_key) ? parse_int(env, local_key, r.source) : r.rank;
    GL_CHECK(r.world_size >= 1, "rendezvous (", r.source, "): ", size_key, "=", r.world_size, " must be >= 1");
    GL_CHECK(r.rank >= 0 && r.rank < r.world_size, "rendezvous (", r.source, "): ", rank_key, "=", r.rank,
             " is outside [0, ", size_key, "=", r.world_size, ")");
    GL_CHECK(r.local_rank >= 0, "rendezvous (", r.source, "): ", local_key, "=", r.local_rank, " is negative");

    std::optional<std::string> addr = env("MASTER_ADDR");
    if (!addr && r.source == "slurm") {
        std::optional<std::string> nodes = env("SLURM_STEP_NODELIST");
        if (!nodes) nodes = env("SLURM_NODELIST");
        if (nodes && !nodes->empty()) addr = slurm_first_host(*nodes);
    }
    if (addr && !addr->empty()) {
        r.master_addr = *addr;
    } else {
        GL_CHECK(r.world_size == 1, "rendezvous (", r.source, "): a world of ", r.world_size,
                 " needs MASTER_ADDR (the host of rank 0)", r.source == "slurm" ? " or SLURM_NODELIST" : "");
    }
    if (env("MASTER_PORT")) {
        r.master_port = parse_int(env, "MASTER_PORT", r.source);
        GL_CHECK(r.master_port >= 1 && r.master_port <= 65535, "rendezvous (", r.source, "): MASTER_PORT=",
                 r.master_port, " is outside 1..65535");
    } else {
        GL_CHECK(r.world_size == 1 || r.source == "slurm", "rendezvous (", r.source, "): a world of ", r.world_size,
                 " needs MASTER_PORT (a free port on the master)");
    }
    return r;
}

int free_loopback_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    GL_CHECK(fd >= 0, "a free loopback port: socket() failed (errno ", errno, ")");
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
    const int err = errno;
    ::close(fd);
    GL_CHECK(ok, "a free loopback port: bind() on 127.0.0.1 failed (errno ", err, ")");
    return ntohs(a.sin_port);
}

}  // namespace gl::dist
