#include "common/trainer_util.h"

#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <thread>

#include "ddp/core/threads.h"
#include "ddp/tensor/cuda.h"
#include "ddp/tensor/tensor.h"

namespace examples {

ddp::dist::World join_job(const std::string& backend) {
  ddp::dist::InitOptions options;
  options.backend = backend;
  return ddp::dist::init_process_group(options);
}

std::vector<double> allreduce_sum(ddp::dist::World& world, const std::vector<double>& values) {
  if (world.size() == 1) return values;
  ddp::Tensor t = ddp::Tensor::zeros({int64_t(values.size())}, ddp::TensorOptions(ddp::kFloat64));
  double* p = t.data<double>();
  for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
  // NCCL needs the tensor on the GPU; mpi and gloo take either.
  ddp::Tensor d = t.to(world.device);
  world.group->allreduce({d}, ddp::dist::ReduceOp::sum)->wait();
  return d.to_vector<double>();
}

std::vector<ddp::optim::ParamGroup> decay_groups(const ddp::nn::Module& model) {
  ddp::Tensors decay, no_decay;
  for (const auto& [name, p] : model.named_parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  std::vector<ddp::optim::ParamGroup> groups;
  groups.push_back({decay, std::nullopt, std::nullopt});
  if (!no_decay.empty()) groups.push_back({no_decay, std::nullopt, 0.0});
  return groups;
}

std::string describe_device(const ddp::Device& device) {
  if (device.is_cuda()) return device.str();
  return device.str() + " (" + std::to_string(std::thread::hardware_concurrency()) + " cores)";
}

std::optional<int64_t> per_rank_batch(int64_t global_batch, const ddp::dist::World& world,
                                      int64_t accum, const std::string& program) {
  const int64_t parts = int64_t(world.size()) * accum;
  if (global_batch % parts == 0 && global_batch >= parts) return global_batch / parts;
  if (world.rank() == 0) {
    const std::string by = "world size " + std::to_string(world.size()) +
                           (accum > 1 ? " x grad-accum " + std::to_string(accum) : "");
    std::fprintf(stderr, "%s: --batch-size: the global batch %lld is not divisible by %s\n",
                 program.c_str(), (long long)global_batch, by.c_str());
  }
  return std::nullopt;
}

int set_cpu_threads(const ddp::dist::World& world) { return set_cpu_threads(world.env); }

int set_cpu_threads(const ddp::dist::LaunchEnv& env) {
  if (const char* v = std::getenv("OMP_NUM_THREADS"); v != nullptr && *v != '\0')
    return std::max(1, std::atoi(v));
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  const int threads = std::max(1, cores / std::max(1, env.local_world_size));
  ddp::set_num_threads(threads);  // Note [CPU threads]
  return threads;
}

}  // namespace examples
