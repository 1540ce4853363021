#pragma once
// Where this process sits in the job, read from whatever launched it:
// torchrun / ddprun, mpirun (Open MPI), srun (Slurm), or nothing at all.
//
//   auto env = ddp::dist::detect_launch_env();
//   int device = ddp::dist::select_local_device(env, cuda_device_count);
//
// Note [Launcher precedence]
// The launchers are tried in a fixed order and the first whose variables are
// present wins:
//   1. torchrun / ddprun — RANK and WORLD_SIZE set. These are the most
//      specific: a torchrun started inside a Slurm allocation or an mpirun
//      still sees SLURM_* / OMPI_* of the outer job, which describe the
//      launcher's own process, not the workers.
//   2. Open MPI — OMPI_COMM_WORLD_RANK set.
//   3. Slurm srun — SLURM_PROCID set. An mpirun inside an allocation inherits
//      SLURM_* too, so Open MPI goes first.
//   4. A single process, rank 0 of 1 ("single").
// Only Open MPI's variables are read among the MPI launchers; MPICH/Hydra
// (PMI_RANK) is not detected.

#include <string>
#include <vector>

namespace ddp::dist {

struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;        // rank among the processes of this node
  int local_world_size = 1;  // processes on this node
  int node_rank = 0;         // which node (torchrun's GROUP_RANK)
  // Where rank 0's rendezvous store listens; empty / 0 when the launcher did
  // not say (mpirun without MASTER_ADDR, a single process).
  std::string master_addr;
  int master_port = 0;
  // "torchrun", "ddprun", "mpirun", "srun", "explicit" (filled in by the
  // caller, e.g. from command-line flags) or "single".
  std::string launcher = "single";
  // How many times the launcher has restarted the worker group (0 on the
  // first attempt), or in ddprun's elastic mode this rank's slot
  // (TORCHELASTIC_RESTART_COUNT, else DDP_RESTART_COUNT). Only torchrun /
  // ddprun restart.
  int restart_count = 0;
  // The launcher hosts the rendezvous store at master_addr:master_port and
  // rank 0 connects to it as a client, so the store outlives every rank
  // (TORCHELASTIC_USE_AGENT_STORE=True: torchrun's agent store, ddprun's
  // elastic mode). init_process_group and connect_store follow it.
  bool agent_store = false;
  // ddprun's elastic mode (--nproc-per-node MIN:MAX or --nnodes MIN:MAX;
  // Note [ddprun elastic] in tools/ddprun/main.cpp), for
  // ddp::parallel::ElasticGroup: rank is this process's replica id, and
  // world_size the founders. On one node the founders are MAX and a
  // replacement keeps its slot's id; across nodes the founders are MIN
  // nodes' workers, and a worker that joins later (a node beyond MIN, a
  // replacement) has an id at or above world_size that no worker had
  // before: so rank < world_size is not checked here.
  bool elastic = false;  // DDP_ELASTIC=1
  // The fewest and most ranks the job runs with: DDP_ELASTIC_MIN /
  // DDP_ELASTIC_MAX (ElasticOptions::min_size / max_size); world_size both
  // when not elastic.
  int elastic_min = 1;
  int elastic_max = 1;
  // DDP_ELASTIC_TOKEN: the job's token, which a joining rank must present
  // (ElasticOptions::job_token reads the same variable); "" when unset.
  std::string elastic_token;
};

// Reads the launch environment; See Note [Launcher precedence]. Inconsistent
// values (rank >= world size, negative numbers, non-numbers) raise
// ddp::ValueError naming the variable.
LaunchEnv detect_launch_env();

// Expands a Slurm node list into host names, in order:
//   "node[01-03,07],gpu5" -> node01 node02 node03 node07 gpu5
// Zero padding of a range is kept ("[08-10]" -> 08 09 10). Several bracket
// groups in one name ("rack[1-2]-n[1-2]") expand as a cross product. A
// malformed list raises ValueError.
std::vector<std::string> expand_slurm_nodelist(const std::string& nodelist);

// The GPU this process should use: local_rank % device_count. Launchers put
// one process per GPU, so local_rank alone is usually the device; the modulo
// lets more processes than GPUs share them round-robin (tests, debugging on
// one GPU; NCCL refuses that, MPI and Gloo accept it). Raises ValueError when
// device_count <= 0.
int select_local_device(const LaunchEnv& env, int device_count);

}  // namespace ddp::dist
