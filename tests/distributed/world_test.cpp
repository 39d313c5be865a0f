// Reading the job's shape from torchrun's and Slurm's environment variables.
#include <catch2/catch.hpp>

#include "frugal/distributed/communicator.hpp"
#include "frugal/distributed/world.hpp"

using namespace frugal;

TEST_CASE("torchrun's variables give rank, world size, local rank and the store address", "[distributed][world]") {
  World w = detect_world({"RANK=3", "WORLD_SIZE=8", "LOCAL_RANK=1", "MASTER_ADDR=node7", "MASTER_PORT=29600",
                          "TORCHELASTIC_USE_AGENT_STORE=True", "SLURM_PROCID=5"});
  CHECK(w.launcher == "torchrun");
  CHECK(w.rank == 3);
  CHECK(w.world_size == 8);
  CHECK(w.local_rank == 1);
  CHECK(w.master_addr == "node7");
  CHECK(w.master_port == 29600);
  CHECK(w.agent_store);
}

TEST_CASE("Slurm's variables, with the first host of the node list as the store address", "[distributed][world]") {
  World w = detect_world({"SLURM_PROCID=9", "SLURM_NTASKS=16", "SLURM_LOCALID=1", "SLURM_JOB_NODELIST=gpu[03-05,9],cpu1"});
  CHECK(w.launcher == "slurm");
  CHECK(w.rank == 9);
  CHECK(w.world_size == 16);
  CHECK(w.local_rank == 1);
  CHECK(w.master_addr == "gpu03");
  CHECK(w.master_port == 29500);
  CHECK_FALSE(w.agent_store);
  CHECK(first_slurm_host("a1,b[1-2]") == "a1");
  CHECK(first_slurm_host("node[007]") == "node007");
  CHECK(detect_world({"SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_STEP_NODELIST=x[1-2]", "SLURM_JOB_NODELIST=y1",
                      "MASTER_ADDR=10.0.0.1"}).master_addr == "10.0.0.1");
}

TEST_CASE("no launcher means one process, and bad values name the variable", "[distributed][world]") {
  World single = detect_world({"PATH=/bin"});
  CHECK(single.world_size == 1);
  CHECK(single.launcher == "single");
  CHECK(connect(single)->backend() == "single");
  CHECK_THROWS_WITH(detect_world({"RANK=2", "WORLD_SIZE=2"}), "RANK must be in [0, 2), got 2");
  CHECK_THROWS_WITH(detect_world({"RANK=x", "WORLD_SIZE=2"}), "environment variable RANK must be an integer, got 'x'");
  CHECK_THROWS_WITH(detect_world({"RANK=0"}), "environment variable WORLD_SIZE is not set");
  CHECK_THROWS_WITH(detect_world({"SLURM_PROCID=0", "SLURM_NTASKS=2"}), Catch::Contains("SLURM_JOB_NODELIST"));
  CHECK_THROWS_WITH(parse_enum_option<CollectiveBackend>("mpi", "distributed.backend"),
                    "distributed.backend must be one of auto, gloo, nccl; got 'mpi'");
  CHECK(to_string(CommunicatorOptions().backend()) == "auto");
}
