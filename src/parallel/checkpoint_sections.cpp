// Per-rank and DDP state as checkpoint sections (checkpoint_sections.h).

#include "ddp/parallel/checkpoint_sections.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "ddp/core/error.h"
#include "ddp/parallel/distributed.h"
#include "ddp/parallel/powersgd.h"
#include "ddp/parallel/zero.h"
#include "ddp/tensor/cuda.h"

namespace ddp::parallel {

io::Exchange checkpoint_exchange(std::shared_ptr<dist::ProcessGroup> group, Device device) {
  DDP_CHECK(group != nullptr, "checkpoint_exchange: the process group is null");
  if (device.is_cpu() && group->backend_name() == "nccl")
    device = Device::cuda(cuda::current_device());
  return [group, device](const std::string& mine) {
    const size_t world = size_t(group->size());
    // The lengths first, so that every rank sends a buffer of one size.
    Tensor length =
        Tensor::from_vector(std::vector<int64_t>{int64_t(mine.size())}, {1}).to(device);
    Tensors lengths;
    for (size_t r = 0; r < world; ++r)
      lengths.push_back(Tensor::zeros({1}, TensorOptions(DType::i64).device(device)));
    group->allgather(lengths, length)->wait();
    std::vector<int64_t> sizes;
    for (const Tensor& t : lengths) sizes.push_back(t.cpu().item<int64_t>());
    const int64_t longest = std::max<int64_t>(1, *std::max_element(sizes.begin(), sizes.end()));

    Tensor bytes = Tensor::zeros({longest}, TensorOptions(DType::u8));
    if (!mine.empty()) std::memcpy(bytes.data<uint8_t>(), mine.data(), mine.size());
    bytes = bytes.to(device);
    Tensors all;
    for (size_t r = 0; r < world; ++r)
      all.push_back(Tensor::zeros({longest}, TensorOptions(DType::u8).device(device)));
    group->allgather(all, bytes)->wait();
    std::vector<std::string> out;
    for (size_t r = 0; r < world; ++r) {
      DDP_CHECK_T(Error, sizes[r] >= 0 && sizes[r] <= longest,
                  "checkpoint_exchange: rank {} sent a length of {}", r, sizes[r]);
      const Tensor host = all[r].cpu();
      out.emplace_back(reinterpret_cast<const char*>(host.data<uint8_t>()), size_t(sizes[r]));
    }
    return out;
  };
}

io::Exchange checkpoint_store_exchange(std::shared_ptr<dist::Store> store, int rank,
                                       int world_size, const std::string& prefix) {
  DDP_CHECK(store != nullptr, "checkpoint_store_exchange: the store is null");
  DDP_CHECK(world_size >= 1 && rank >= 0 && rank < world_size,
            "checkpoint_store_exchange: rank {} is not in a world of size {}", rank, world_size);
  auto round = std::make_shared<int64_t>(0);
  return [store, rank, world_size, prefix, round](const std::string& mine) {
    auto key = [&](int64_t n, int r) { return fmt::format("{}{}/{}", prefix, n, r); };
    const int64_t n = (*round)++;
    store->set(key(n, rank), mine);
    std::vector<std::string> keys, out;
    for (int r = 0; r < world_size; ++r) keys.push_back(key(n, r));
    store->wait(keys);
    for (const std::string& k : keys) out.push_back(store->get_string(k));
    // Every rank has read round n - 2: it set its key of round n - 1 after
    // that, and this rank has now seen all of those.
    if (n >= 2) store->delete_key(key(n - 2, rank));
    return out;
  };
}

io::SaveOptions checkpoint_save_options(std::shared_ptr<dist::ProcessGroup> group,
                                        io::SaveOptions options, Device device) {
  DDP_CHECK(group != nullptr, "checkpoint_save_options: the process group is null");
  options.rank = group->rank();
  options.world_size = group->size();
  options.exchange = checkpoint_exchange(group, device);
  return options;
}

io::LoadOptions checkpoint_load_options(const dist::ProcessGroup& group, io::LoadOptions options) {
  options.rank = group.rank();
  options.world_size = group.size();
  return options;
}

void add_checkpoint_section(io::Checkpoint& checkpoint, const std::string& name,
                            ZeroRedundancyOptimizer& zero) {
  auto load = [&zero](const io::Checkpoint::RankFiles& files) {
    std::vector<TensorDict> shards;
    for (int r = 0; r < files.saved_world_size; ++r) shards.push_back(files.read(r));
    if (files.from_peers)
      zero.load_peer_shards(shards);  // Note [ZeRO-1 in an elastic job]
    else
      zero.load_sharded_state_dict(shards);
  };
  // The rollback puts back this rank's own shard as sharded_state_dict()
  // gave it, at the same world size: only the local optimizer's part.
  auto restore = [&zero](const TensorDict& own) {
    TensorDict local;
    for (const auto& [key, t] : own)
      if (key.rfind("local.", 0) == 0) local.insert(key.substr(6), t);
    zero.local_optimizer().load_state_dict(local);
    zero.param_groups()[0].lr = zero.local_optimizer().param_groups()[0].lr;
    zero.param_groups()[0].weight_decay = zero.local_optimizer().param_groups()[0].weight_decay;
  };
  checkpoint.add_per_rank(
      name, [&zero] { return zero.sharded_state_dict(); }, load, restore,
      [&zero] { return zero.peer_shard(); });
}

void add_checkpoint_section(io::Checkpoint& checkpoint, const std::string& name,
                            std::shared_ptr<PowerSGDState> state) {
  DDP_CHECK(state != nullptr, "add_checkpoint_section: PowerSGD section '{}' is a null pointer",
            name);
  auto load = [state, name](const io::Checkpoint::RankFiles& files) {
    if (files.from_peers) {  // Note [PowerSGD in an elastic job]
      DDP_CHECK(files.saved_world_size >= 1, "PowerSGD section '{}': no member sent its state",
                name);
      state->load_peer_state(files.read(0));
      return;
    }
    DDP_CHECK(files.saved_world_size == files.world_size,
              "PowerSGD section '{}': saved by {} ranks, loaded by {}; its error memory is each "
              "rank's own residual, so it resumes only at the same world size (leave the section "
              "out and load with strict = false to start compression afresh)",
              name, files.saved_world_size, files.world_size);
    state->load_state_dict(files.read(files.rank));
  };
  checkpoint.add_per_rank(
      name, [state] { return state->state_dict(); }, load,
      [state](const TensorDict& own) { state->load_state_dict(own); });
}

void add_checkpoint_section(io::Checkpoint& checkpoint, const std::string& name,
                            DistributedDataParallelBase& ddp) {
  checkpoint.add(
      name, [&ddp] { return ddp.bucket_plan_state(); },
      [&ddp](const TensorDict& state) { ddp.load_bucket_plan_state(state); });
}

}  // namespace ddp::parallel
