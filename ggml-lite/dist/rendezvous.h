// Where a process stands in a data-parallel run, from the launcher's environment:
// - torchrun / accelerate: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT;
// - Slurm's srun: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; the master from MASTER_ADDR /
//   MASTER_PORT when set, else the first host of SLURM_STEP_NODELIST / SLURM_NODELIST (a plain
//   name, or the first of "name[3-5,7]") and port 29500;
// - Open MPI's mpirun: OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK;
//   the master from MASTER_ADDR / MASTER_PORT (mpirun sets none: export them, or -x them).
// The first family whose rank variable is set wins, in that order. None set: a world of one.
#pragma once
#include <functional>
#include <optional>
#include <string>

namespace gl::dist {

struct Rendezvous {
    std::string source = "none";  // "torchrun", "slurm", "mpi", "none"
    int rank = 0, world_size = 1, local_rank = 0;
    std::string master_addr = "127.0.0.1";
    int master_port = 29500;
};

using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup process_env();  // getenv

// Parses and validates (a clear gl::Error naming the variable: not an integer, rank >= world
// size, a negative local rank, a world of several without a master address, a port outside
// 1..65535).
Rendezvous rendezvous_from_env(const EnvLookup& env = process_env());

// The first host of a Slurm node list ("a01", "a[01-04,07],b02" -> "a01").
std::string slurm_first_host(const std::string& nodelist);

// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, read back, released): for
// ranks started on one host. Throws gl::Error when no socket can be bound.
int free_loopback_port();

}  // namespace gl::dist
