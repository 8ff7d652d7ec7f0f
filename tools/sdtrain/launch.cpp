#include "tools/sdtrain/launch.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>

#include "ggml-lite/dist/nccl.h"
#include "ggml-lite/dist/tcp.h"
#include "ggml-lite/core/cuda_devices.h"
#include "tools/common/cli.h"

extern "C" char** environ;

namespace sdtrain {

using gl::cli::UsageError;

std::vector<int> parse_gpu_list(const std::string& text) {
    std::vector<int> out;
    size_t at = 0;
    while (at <= text.size()) {
        const size_t end = std::min(text.find(',', at), text.size());
        const std::string item = text.substr(at, end - at);
        const bool digits = !item.empty() && item.size() <= 4 && item.find_first_not_of("0123456789") == std::string::npos;
        if (!digits)
            throw UsageError(gl::cat("--gpus '", text, "': a comma-separated list of GPU indices, such as 0,1"));
        const int g = std::stoi(item);
        for (int x : out)
            if (x == g) throw UsageError(gl::cat("--gpus '", text, "': GPU ", g, " is listed twice"));
        out.push_back(g);
        at = end + 1;
    }
    return out;
}

namespace {

std::string env_or(const gl::dist::EnvLookup& env, const char* key, const std::string& dflt) {
    const std::optional<std::string> v = env(key);
    return v ? *v : dflt;
}

// A GPU index as CUDA_VISIBLE_DEVICES names it: through the list already set, when there is one.
std::string visible_name(int gpu, const std::string& visible) {
    if (visible.empty()) return std::to_string(gpu);
    std::vector<std::string> items;
    size_t at = 0;
    while (at <= visible.size()) {
        const size_t end = std::min(visible.find(',', at), visible.size());
        items.push_back(visible.substr(at, end - at));
        at = end + 1;
    }
    GL_CHECK(gpu >= 0 && size_t(gpu) < items.size(), "--gpus: GPU ", gpu, " is not among CUDA_VISIBLE_DEVICES=", visible);
    return items[size_t(gpu)];
}

}  // namespace

LaunchPlan plan_launch(const train::RunConfig& c, const gl::dist::EnvLookup& env,
                       const std::function<int()>& cuda_devices) {
    LaunchPlan p;
    std::vector<int> gpus;
    if (c.gpus) gpus = parse_gpu_list(*c.gpus);
    if (c.dist_backend && *c.dist_backend != "nccl" && *c.dist_backend != "tcp")
        throw UsageError(gl::cat("--dist_backend '", *c.dist_backend, "': nccl or tcp"));
    if (c.backend == gl::Backend::cpu && c.gpus)
        throw UsageError(gl::cat("--gpus ", *c.gpus, " with --backend cpu: the CPU backend uses no GPU"));
    if (c.backend == gl::Backend::cpu && c.dist_backend == "nccl")
        throw UsageError("--dist_backend nccl with --backend cpu: NCCL reduces device memory; the CPU backend uses tcp");

    p.rendezvous = gl::dist::rendezvous_from_env(env);
    if (p.rendezvous.source != "none") {  // a launcher started this process as one rank
        p.mode = LaunchPlan::Mode::rank;
        // CUDA is not asked (it would fix the visible devices): the default is settled when it starts.
        p.dist_backend = c.dist_backend.value_or(c.backend == gl::Backend::cpu ? "tcp" : "");
        if (env("SDTRAIN_LAUNCHED")) return p;  // the supervisor chose the GPU already
        const int local = p.rendezvous.local_rank;
        if (!gpus.empty()) {
            if (p.dist_backend != "tcp" && size_t(local) >= gpus.size())
                throw UsageError(gl::cat("--gpus ", *c.gpus, ": local rank ", local, " has no GPU of its own (",
                                         gpus.size(), " listed; --dist_backend tcp lets ranks share them)"));
            p.gpu = gpus[size_t(local) % gpus.size()];
        } else if (p.dist_backend != "tcp") {
            // NCCL takes a GPU per rank: the LOCAL_RANK-th, unless the launcher left one visible.
            const std::string visible = env_or(env, "CUDA_VISIBLE_DEVICES", "");
            if (visible.empty() || visible.find(',') != std::string::npos) p.gpu = local;
        }
        return p;
    }

    const int devices = cuda_devices();
    const bool cuda = c.backend == gl::Backend::cuda || (c.backend == gl::Backend::automatic && devices > 0);
    if (c.gpus && devices == 0)
        throw UsageError(gl::cat("--gpus ", *c.gpus, ": this host has no CUDA device"));
    for (int g : gpus)
        if (g >= devices)
            throw UsageError(gl::cat("--gpus ", *c.gpus, ": GPU ", g, " does not exist (this host has ", devices,
                                     devices == 1 ? " CUDA device: 0)" : gl::cat(" CUDA devices: 0..", devices - 1, ")")));
    if (c.dist_backend == "nccl" && !cuda)
        throw UsageError("--dist_backend nccl: this run is on the CPU (no CUDA device); use --dist_backend tcp");
    p.dist_backend = c.dist_backend.value_or(cuda ? "nccl" : "tcp");
    const bool nccl = p.dist_backend == "nccl";
    const int n = c.num_processes.value_or(gpus.empty() ? 1 : int(gpus.size()));
    if (c.num_processes && !gpus.empty()) {
        if (nccl && n != int(gpus.size()))
            throw UsageError(gl::cat("--num_processes ", n, " and --gpus ", *c.gpus, " (", gpus.size(),
                                     " GPUs) disagree: nccl runs one process per GPU (--dist_backend tcp lets "
                                     "processes share GPUs)"));
        if (!nccl && n < int(gpus.size()))
            throw UsageError(gl::cat("--num_processes ", n, " and --gpus ", *c.gpus, " disagree: fewer processes than GPUs"));
    }
    if (gpus.empty() && cuda) {  // nccl: the first n GPUs; tcp: every GPU in turn
        if (nccl && n > devices)
            throw UsageError(gl::cat("--num_processes ", n, ": this host has ", devices, " CUDA device",
                                     devices == 1 ? "" : "s", " and nccl takes one GPU per process (--gpus to choose "
                                     "them, --dist_backend tcp to share them)"));
        for (int g = 0; g < std::max(1, std::min(n, devices)); g++) gpus.push_back(g);
    }
    if (n == 1) {
        p.gpu = c.gpus ? gpus[0] : -1;
        return p;
    }
    p.mode = LaunchPlan::Mode::supervise;
    p.processes = n;
    for (int r = 0; r < n; r++) p.child_gpus.push_back(gpus.empty() ? -1 : gpus[size_t(r) % gpus.size()]);
    return p;
}

void select_device(const LaunchPlan& p) {
    if (p.gpu < 0) return;
    const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
    ::setenv("CUDA_VISIBLE_DEVICES", visible_name(p.gpu, v ? v : "").c_str(), 1);
}

std::unique_ptr<gl::dist::Communicator> connect_rank(const LaunchPlan& p) {
    const gl::dist::EnvLookup env = gl::dist::process_env();
    const std::string t = env_or(env, "SDTRAIN_DIST_TIMEOUT", "600");
    char* end = nullptr;
    const long secs = std::strtol(t.c_str(), &end, 10);
    GL_CHECK(end && *end == '\0' && secs >= 1 && secs <= 86400, "SDTRAIN_DIST_TIMEOUT=", t,
             ": seconds, from 1 to 86400");
    std::string backend = p.dist_backend;
    if (backend.empty()) backend = gl::cuda_available() ? "nccl" : "tcp";
    gl::dist::disable_nvls();  // NVLink multicast stays off, whatever the launcher set
    auto tcp = gl::dist::connect_tcp(p.rendezvous, std::chrono::seconds(secs));
    if (backend == "tcp") return tcp;
    const std::string why = gl::dist::nccl_unavailable();
    GL_CHECK(why.empty(), "--dist_backend nccl: ", why);
    return gl::dist::connect_nccl(std::move(tcp));
}

// ---- the supervisor ----

namespace {

constexpr int kMaxRanks = 1024;
pid_t g_children[kMaxRanks];
volatile sig_atomic_t g_count = 0, g_signalled = 0;

void forward(int sig) {  // async-signal-safe: kill(2) only
    g_signalled = 1;
    for (int i = 0; i < g_count; i++)
        if (g_children[i] > 0) ::kill(g_children[i], sig);
}

std::string describe(int status) {
    if (WIFSIGNALED(status)) return gl::cat("was killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)), ")");
    return gl::cat("exited with status ", WEXITSTATUS(status));
}

}  // namespace

int supervise(const LaunchPlan& p, const std::vector<std::string>& args) {
    GL_CHECK(p.processes >= 2 && p.processes <= kMaxRanks, "--num_processes ", p.processes, ": 2 to ", kMaxRanks);
    const int port = gl::dist::free_loopback_port();
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    const std::string visible_list = visible ? visible : "";
    std::vector<std::string> gpu_names;
    for (int g : p.child_gpus) gpu_names.push_back(g < 0 ? "" : visible_name(g, visible_list));
    std::vector<std::string> argv_s = {"/proc/self/exe"};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    // Every rank's environment, made before forking (a child of a threaded process only execs).
    std::vector<std::vector<std::string>> envs(size_t(p.processes));
    std::vector<std::vector<char*>> envps(size_t(p.processes));
    for (int r = 0; r < p.processes; r++) {
        std::map<std::string, std::string> set = {
            {"RANK", std::to_string(r)},          {"LOCAL_RANK", std::to_string(r)},
            {"WORLD_SIZE", std::to_string(p.processes)}, {"LOCAL_WORLD_SIZE", std::to_string(p.processes)},
            {"MASTER_ADDR", "127.0.0.1"},         {"MASTER_PORT", std::to_string(port)},
            {"NCCL_NVLS_ENABLE", "0"},            {"SDTRAIN_LAUNCHED", "1"}};
        if (!gpu_names[size_t(r)].empty()) set["CUDA_VISIBLE_DEVICES"] = gpu_names[size_t(r)];
        std::vector<std::string>& e = envs[size_t(r)];
        for (char** v = environ; *v; v++) {
            const std::string kv = *v;
            if (!set.count(kv.substr(0, kv.find('=')))) e.push_back(kv);
        }
        for (const auto& [k, v] : set) e.push_back(k + "=" + v);
        for (std::string& kv : e) envps[size_t(r)].push_back(kv.data());
        envps[size_t(r)].push_back(nullptr);
    }

    struct sigaction sa {};
    sa.sa_handler = forward;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    std::fflush(stdout);
    std::fflush(stderr);
    const pid_t parent = ::getpid();
    for (int r = 0; r < p.processes; r++) {
        const pid_t pid = ::fork();
        if (pid < 0) {
            forward(SIGKILL);
            gl::fail("--num_processes: cannot start rank ", r, " (fork: ", std::strerror(errno), ")");
        }
        if (pid == 0) {
            // Its own process group: a terminal's Ctrl-C reaches the supervisor alone, which
            // forwards it once; the rank ends with the supervisor.
            ::setpgid(0, 0);
            ::prctl(PR_SET_PDEATHSIG, SIGTERM);
            if (::getppid() != parent) ::_exit(1);
            struct sigaction dfl {};
            dfl.sa_handler = SIG_DFL;
            sigaction(SIGINT, &dfl, nullptr);
            sigaction(SIGTERM, &dfl, nullptr);
            ::execve(argv[0], argv.data(), envps[size_t(r)].data());
            static const char kFail[] = "sdtrain: a rank could not start /proc/self/exe\n";
            const ssize_t w = ::write(STDERR_FILENO, kFail, sizeof kFail - 1);
            (void)w;
            ::_exit(127);
        }
        g_children[r] = pid;
        g_count = r + 1;
    }

    int failed_rank = -1, failed_status = 0, left = p.processes, stopped_by_signal = 0;
    std::chrono::steady_clock::time_point kill_at{};
    bool terminating = false;
    while (left > 0) {
        int status = 0;
        const pid_t pid = ::waitpid(-1, &status, terminating ? WNOHANG : 0);
        if (pid == 0 || (pid < 0 && errno == EINTR)) {
            if (terminating && std::chrono::steady_clock::now() >= kill_at) {
                forward(SIGKILL);
                kill_at = std::chrono::steady_clock::now() + std::chrono::hours(1);
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
            continue;
        }
        if (pid < 0) break;  // no child left
        int r = 0;
        while (r < p.processes && g_children[r] != pid) r++;
        if (r == p.processes) continue;
        g_children[r] = -1;
        left--;
        const bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        const bool stopped = WIFEXITED(status) && WEXITSTATUS(status) == 130 && g_signalled;
        if (stopped) stopped_by_signal++;
        if (!clean && !stopped && failed_rank < 0) {
            failed_rank = r;
            failed_status = status;
            if (left > 0) {
                std::fprintf(stderr, "sdtrain: rank %d (pid %d) %s; stopping the other ranks\n", r, int(pid),
                             describe(status).c_str());
                forward(SIGTERM);
                terminating = true;
                kill_at = std::chrono::steady_clock::now() + std::chrono::seconds(10);
            }
        }
    }
    if (failed_rank >= 0) {
        std::fprintf(stderr, "sdtrain: error: rank %d of %d %s\n", failed_rank, p.processes,
                     describe(failed_status).c_str());
        return 1;
    }
    return stopped_by_signal > 0 ? 130 : 0;
}

}  // namespace sdtrain
