#pragma once
// Pieces both example trainers need around libddp: joining the job, summing
// a few numbers over the ranks, decay/no-decay parameter groups, the
// warmup length, and the device's name for the banner.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddp/dist/init.h"
#include "ddp/nn/module.h"
#include "ddp/optim/optimizer.h"

namespace examples {

// init_process_group with an optional backend ("" = the default for the
// device; see docs/dist.md).
ddp::dist::World join_job(const std::string& backend);

// Sums `values` over every rank (one allreduce of an f64 tensor on the
// rank's device) and returns the sums.
std::vector<double> allreduce_sum(ddp::dist::World& world, const std::vector<double>& values);

// Two groups: weights of matrices and convolutions (dim >= 2) with the
// optimizer's weight decay, biases and normalisation parameters (dim <= 1)
// without, the usual recipe for ResNets and GPTs.
std::vector<ddp::optim::ParamGroup> decay_groups(const ddp::nn::Module& model);

// "cpu (2 threads)" or "cuda:0 (NVIDIA H100 ...)" style banner text.
std::string describe_device(const ddp::Device& device);

// Items of the global batch each rank takes per micro-batch, or nullopt
// (after rank 0 printed why, naming --batch-size) when world size x accum
// does not divide it; the caller then returns 2 from main (Note [Usage
// errors exit 2]), so the process group is torn down normally.
std::optional<int64_t> per_rank_batch(int64_t global_batch, const ddp::dist::World& world,
                                      int64_t accum, const std::string& program);

// Note [Threads per rank]
// Several ranks on one CPU machine each start a full OpenMP (oneDNN) and
// OpenBLAS thread pool by default, so N ranks run N x cores threads that
// fight over the cores. Like torchrun, which sets OMP_NUM_THREADS=1, the
// trainers give each CPU rank cores / local_world_size threads (at least 1),
// unless OMP_NUM_THREADS is set, which always wins. Returns the count used.
int set_cpu_threads(const ddp::dist::World& world);
// The same before a World exists (the fault-tolerant trainers make their
// groups through an ElasticGroup).
int set_cpu_threads(const ddp::dist::LaunchEnv& env);

}  // namespace examples
