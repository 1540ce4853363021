#pragma once
// A process group of one rank for unit tests of the DDP engine: every
// collective completes at once and leaves its tensors as they are (the
// average, sum, or gather over one rank), and the group counts what it was
// asked to do. For several ranks in one process see thread_group.h.

#include <cstdint>
#include <string>
#include <vector>

#include "ddp/dist/process_group.h"
#include "ddp/dist/work.h"

namespace ddp::test {

class WorldOfOne : public dist::ProcessGroup {
 public:
  WorldOfOne() : ProcessGroup(0, 1) {}
  std::string backend_name() const override { return "world_of_one"; }
  std::vector<int64_t> allreduce_sizes;  // per allreduce: its first tensor's element count
  int broadcasts = 0;

 protected:
  dist::WorkPtr do_allreduce(Tensors& t, dist::ReduceOp) override {
    allreduce_sizes.push_back(t[0].numel());
    return dist::completed_work("allreduce", t);
  }
  dist::WorkPtr do_broadcast(Tensors& t, int) override {
    ++broadcasts;
    return dist::completed_work("broadcast", t);
  }
  dist::WorkPtr do_reduce(Tensors& t, int, dist::ReduceOp) override {
    return dist::completed_work("reduce", t);
  }
  dist::WorkPtr do_allgather(Tensors& o, const Tensor& in) override {
    o[0].copy_(in);
    return dist::completed_work("allgather", o);
  }
  dist::WorkPtr do_reduce_scatter(const Tensor& out, Tensors& in, dist::ReduceOp) override {
    Tensor(out).copy_(in[0]);
    return dist::completed_work("reduce_scatter", {out});
  }
  dist::WorkPtr do_all_to_all(const Tensor& out, const Tensor& in) override {
    Tensor(out).copy_(in);
    return dist::completed_work("all_to_all", {out});
  }
  dist::WorkPtr do_barrier() override { return dist::completed_work("barrier"); }
  dist::WorkPtr do_send(const Tensor&, int, int) override { return dist::completed_work("send"); }
  dist::WorkPtr do_recv(const Tensor&, int, int) override { return dist::completed_work("recv"); }
};

}  // namespace ddp::test
