#pragma once
// A process group that makes every allreduce as slow as it would be on a
// given cluster link, so that overlap can be studied on one machine
// (bench_ddp --simulate-link BW_GBITS,LATENCY_US,WORLD).
//
// Note [Simulated link]
// Each allreduce runs on the real group first. Then a link thread (one per
// group, first come first served, like one network port) holds the result
// back for the time a ring allreduce of that many bytes takes on WORLD ranks
// joined by links of bandwidth B and latency L:
//   2 (n-1)/n * bytes / B  +  2 (n-1) * L
// The transfer starts when both the data is ready and the link is free. Only
// the Work's completion is delayed, on the link thread: the caller's thread
// and the compute stream never sleep, exactly as with a real network.

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "ddp/dist/process_group.h"

namespace bench {

struct LinkModel {
  double gbits_per_s = 0;  // link bandwidth, gigabits per second
  double latency_us = 0;
  int world = 0;           // ranks in the simulated ring
  // Parses "BW_GBITS,LATENCY_US,WORLD"; throws ddp::ValueError.
  static LinkModel parse(const std::string& spec);
  // Seconds a ring allreduce of `bytes` takes on this link.
  double allreduce_seconds(size_t bytes) const;
  std::string describe() const;
};

class SimulatedLinkGroup : public ddp::dist::ProcessGroup {
 public:
  SimulatedLinkGroup(std::shared_ptr<ddp::dist::ProcessGroup> inner, LinkModel link);
  ~SimulatedLinkGroup() override;
  std::string backend_name() const override { return inner_->backend_name() + "+simulated-link"; }
  ddp::dist::BackendCaps caps() const override { return inner_->caps(); }

 protected:
  ddp::dist::WorkPtr do_allreduce(ddp::Tensors& tensors, ddp::dist::ReduceOp op) override;
  ddp::dist::WorkPtr do_broadcast(ddp::Tensors& t, int root) override { return inner_->broadcast(t, root); }
  ddp::dist::WorkPtr do_reduce(ddp::Tensors& t, int root, ddp::dist::ReduceOp op) override {
    return inner_->reduce(t, root, op);
  }
  ddp::dist::WorkPtr do_allgather(ddp::Tensors& out, const ddp::Tensor& in) override {
    return inner_->allgather(out, in);
  }
  ddp::dist::WorkPtr do_reduce_scatter(const ddp::Tensor& out, ddp::Tensors& in,
                                       ddp::dist::ReduceOp op) override {
    return inner_->reduce_scatter(out, in, op);
  }
  ddp::dist::WorkPtr do_all_to_all(const ddp::Tensor& out, const ddp::Tensor& in) override {
    return inner_->all_to_all(out, in);
  }
  ddp::dist::WorkPtr do_barrier() override { return inner_->barrier(); }
  ddp::dist::WorkPtr do_send(const ddp::Tensor& t, int dst, int tag) override { return inner_->send(t, dst, tag); }
  ddp::dist::WorkPtr do_recv(const ddp::Tensor& t, int src, int tag) override { return inner_->recv(t, src, tag); }

 private:
  struct Transfer {
    ddp::dist::WorkPtr inner, outer;
    double seconds = 0;
  };
  void run_link();

  std::shared_ptr<ddp::dist::ProcessGroup> inner_;
  LinkModel link_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Transfer> queue_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace bench
