// How an sdtrain process takes part in a data-parallel run (README: Training on several GPUs):
// - single: one process, no ranks (no launcher's variables, --num_processes 1 or none);
// - supervise: --gpus 0,1 / --num_processes N on one host: this process starts N ranks of itself
//   (/proc/self/exe, the same arguments) with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
//   MASTER_ADDR=127.0.0.1, MASTER_PORT (a free loopback port), CUDA_VISIBLE_DEVICES (the rank's
//   GPU) and NCCL_NVLS_ENABLE=0, then supervises them: Ctrl-C / SIGTERM is forwarded to every
//   rank; a rank that dies (a signal, or a non-zero status) makes it stop the others (SIGTERM, then
//   SIGKILL after a grace period) and exit 1 naming the rank and its status;
// - rank: the launcher's variables are set (torchrun / accelerate, Slurm's srun, Open MPI's mpirun:
//   dist/rendezvous.h), so this process is one rank: --gpus picks its GPU by LOCAL_RANK (through
//   CUDA_VISIBLE_DEVICES, before CUDA starts; without --gpus, NCCL's rank takes GPU LOCAL_RANK
//   unless the launcher left it one GPU), and it joins the others through --dist_backend.
// --dist_backend: nccl (default on CUDA; one GPU per rank) or tcp (host memory: the CPU backend, or
// several ranks on one GPU). Bad combinations are gl::cli::UsageError naming the options, before
// any rank starts.
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ggml-lite/dist/communicator.h"
#include "ggml-lite/dist/rendezvous.h"
#include "train/run/config.h"

namespace sdtrain {

struct LaunchPlan {
    enum class Mode { single, supervise, rank } mode = Mode::single;
    int processes = 1;              // supervise: the ranks to start
    std::vector<int> child_gpus;    // supervise: each rank's GPU (-1: the CPU backend)
    std::string dist_backend;       // "nccl" | "tcp"
    gl::dist::Rendezvous rendezvous;  // rank: where this process stands
    int gpu = -1;                   // rank / single: the GPU to make visible (-1: leave CUDA_VISIBLE_DEVICES)
};

// --gpus as indices ("0,1"); UsageError naming the option for anything else or a repeated GPU.
std::vector<int> parse_gpu_list(const std::string& text);

// Decides from the options, the launcher's environment and the CUDA devices this host has (only
// asked for when no launcher set the rank: `cuda_devices` is called at most once).
LaunchPlan plan_launch(const train::RunConfig& c, const gl::dist::EnvLookup& env,
                       const std::function<int()>& cuda_devices);

// Rank / single: makes p.gpu the process' only visible GPU (mapped through a CUDA_VISIBLE_DEVICES
// list already set). Call before anything starts CUDA.
void select_device(const LaunchPlan& p);

// Supervise: starts the ranks and waits for them; returns the exit status (0 all done, 130 all
// stopped by a signal, 1 a rank failed: named on stderr).
int supervise(const LaunchPlan& p, const std::vector<std::string>& args);

// Rank: the communicator of p.dist_backend over p.rendezvous (waits bounded by
// SDTRAIN_DIST_TIMEOUT seconds, default 600: rank 0's samples and saves must fit in it).
std::unique_ptr<gl::dist::Communicator> connect_rank(const LaunchPlan& p);

}  // namespace sdtrain
