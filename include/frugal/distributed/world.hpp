#pragma once
// Who this process is among the processes of a job, read from the environment the way PyTorch
// jobs are launched: torchrun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) or Slurm
// (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, the first host of SLURM_STEP_NODELIST or
// SLURM_JOB_NODELIST). torchrun's variables win when both are present; neither means one process.
//
//   frugal::World world = frugal::detect_world(frugal::process_environment());
//   if (world.world_size > 1) ... connect a communicator

#include <cstdint>
#include <string>
#include <vector>

namespace frugal {

struct World {
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int64_t master_port = 29500;
  std::string launcher = "single";  // "torchrun", "slurm" or "single"
  /// torchrun's agent already serves the rendezvous store: rank 0 must not start one.
  bool agent_store = false;
};

/// Throws OptionError naming the variable when a value is missing, malformed or inconsistent.
World detect_world(const std::vector<std::string>& environment);

/// The first host of a Slurm node list: "gpu[03-05,9],cpu1" -> "gpu03".
std::string first_slurm_host(const std::string& nodelist);

}  // namespace frugal
