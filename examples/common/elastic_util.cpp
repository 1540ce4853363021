// The fault-tolerant trainers' shared pieces (elastic_util.h).

#include "common/elastic_util.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cstdio>
#include <vector>

#include "ddp/tensor/tensor.h"

namespace examples {

using namespace ddp;

parallel::ElasticOptions elastic_options(const dist::LaunchEnv& env) {
  parallel::ElasticOptions eo;
  eo.min_size = env.elastic ? env.elastic_min : 1;
  eo.max_size = env.elastic ? env.elastic_max : 0;
  eo.job_token = env.elastic_token;
  return eo;
}

int64_t state_hash(const nn::Module& model, const optim::Optimizer& opt) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const Tensor& t) {
    const Tensor c = t.contiguous().cpu();
    const auto* p = static_cast<const uint8_t*>(c.data_ptr());
    for (size_t i = 0, n = size_t(c.numel()) * element_size(c.dtype()); i < n; ++i)
      h = (h ^ p[i]) * 1099511628211ull;
  };
  for (const Tensor& t : model.parameters()) mix(t);
  for (const auto& [name, t] : opt.state_dict()) mix(t);
  return int64_t(h);
}

void check_replicas(parallel::ElasticGroup& elastic, const nn::Module& model,
                    const optim::Optimizer& opt) {
  auto& g = *elastic.group();
  Tensor mine = Tensor::from_vector(std::vector<int64_t>{state_hash(model, opt)}, {1});
  Tensors all;
  for (int r = 0; r < g.size(); ++r) all.push_back(Tensor::zeros({1}, DType::i64));
  try {
    g.allgather(all, mine)->wait(g.timeout());
  } catch (const Error& e) {
    if (elastic.rank() == 0) std::printf("replicas: not checked (%s)\n", e.what());
    return;
  }
  bool same = true;
  for (const Tensor& t : all) same = same && t.item<int64_t>() == mine.item<int64_t>();
  if (elastic.rank() == 0)
    std::printf("replicas: %s after generation %lld (%d ranks, step %lld)\n",
                same ? "identical" : "DIFFER", (long long)elastic.generation(), g.size(),
                (long long)elastic.step());
}

void follow_membership(parallel::ElasticGroup& elastic,
                       parallel::DistributedDataParallelBase& ddp_model, const nn::Module& model,
                       const optim::Optimizer& opt, bool check) {
  elastic.on_change([&elastic, &ddp_model, &model, &opt, check] {
    ddp_model.reset_group(elastic.group());
    if (check) check_replicas(elastic, model, opt);
    if (elastic.rank() == 0)
      std::printf("membership: generation %lld, %d rank(s) (replicas %s) at step %lld\n",
                  (long long)elastic.generation(), elastic.size(),
                  fmt::format("{}", fmt::join(elastic.members(), ",")).c_str(),
                  (long long)elastic.step());
    std::fflush(stdout);
  });
}

void report_join(parallel::ElasticGroup& elastic, double seconds, const nn::Module& model,
                 const optim::Optimizer& opt, bool check) {
  std::printf("replica %d joined at step %lld after %.2f s\n", elastic.replica_id(),
              (long long)elastic.step(), seconds);
  if (check) check_replicas(elastic, model, opt);
  std::fflush(stdout);
}

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void CommitLog::write(const parallel::ElasticGroup& elastic, int64_t count) {
  if (path_.empty() || elastic.rank() != 0) return;
  if (!file_) file_.emplace(path_, 0, /*append=*/true);
  file_->write(io::json::Object({.significant_digits = 17})
                   .add("step", elastic.step())
                   .add("time", unix_seconds())
                   .add("world_size", elastic.size())
                   .add("generation", elastic.generation())
                   .add(count_key_, count));
}

}  // namespace examples
