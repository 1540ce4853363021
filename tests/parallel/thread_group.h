#pragma once
// ThreadGroup: a process group for tests whose ranks are threads of this
// process. Its only collective is a sum allreduce, and it counts the
// allreduces. Alone (size 1) it returns the tensors unchanged; created by
// thread_groups(), its ranks meet in a shared Meeting and sum their tensors
// in rank order (deterministic), on the CPU or on one shared GPU.

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "ddp/core/error.h"
#include "ddp/dist/process_group.h"
#include "ddp/dist/work.h"
#include "ddp/tensor/cuda.h"

namespace ddp::test {

struct Meeting {
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  uint64_t generation = 0;
  std::vector<Tensors> inputs;
  std::vector<Tensors> all;  // the inputs of the last meeting
  Tensors result;
};

class ThreadGroup : public dist::ProcessGroup {
 public:
  ThreadGroup(int rank, int size, std::shared_ptr<Meeting> meeting)
      : ProcessGroup(rank, size), meeting_(std::move(meeting)) {}
  std::string backend_name() const override { return "threads"; }
  std::atomic<int> allreduces{0};
  std::atomic<int> broadcasts{0};

 protected:
  dist::WorkPtr do_allreduce(Tensors& tensors, dist::ReduceOp op) override {
    EXPECT_TRUE(op == dist::ReduceOp::sum || op == dist::ReduceOp::avg);
    ++allreduces;
    if (size() > 1) meet(tensors, [](const std::vector<Tensors>& in) { return sum_of(in); });
    if (op == dist::ReduceOp::avg)
      for (Tensor& t : tensors) t.mul_(1.0 / size());
    return dist::completed_work("allreduce", tensors);
  }
  // Every rank gets the root's tensors.
  dist::WorkPtr do_broadcast(Tensors& tensors, int root) override {
    ++broadcasts;
    if (size() > 1)
      meet(tensors, [root](const std::vector<Tensors>& in) { return in[size_t(root)]; });
    return dist::completed_work("broadcast", tensors);
  }
  dist::WorkPtr do_reduce(Tensors&, int, dist::ReduceOp) override { return unsupported(); }
  dist::WorkPtr do_allgather(Tensors& out, const Tensor& in) override {
    Tensors mine{in};
    Tensors all = meet_all(mine);
    for (size_t r = 0; r < out.size(); ++r) out[r].copy_(all[r]);
    return dist::completed_work("allgather", out);
  }
  dist::WorkPtr do_reduce_scatter(const Tensor&, Tensors&, dist::ReduceOp) override {
    return unsupported();
  }
  dist::WorkPtr do_all_to_all(const Tensor&, const Tensor&) override { return unsupported(); }
  dist::WorkPtr do_barrier() override { return unsupported(); }
  dist::WorkPtr do_send(const Tensor&, int, int) override { return unsupported(); }
  dist::WorkPtr do_recv(const Tensor&, int, int) override { return unsupported(); }

 private:
  using Combine = std::function<Tensors(const std::vector<Tensors>&)>;

  static dist::WorkPtr unsupported() {
    DDP_THROW(NotImplementedError, "ThreadGroup: allreduce, broadcast and allgather only");
  }

  // The sum in rank order (deterministic).
  static Tensors sum_of(const std::vector<Tensors>& in) {
    Tensors result = in[0];
    for (size_t r = 1; r < in.size(); ++r)
      for (size_t i = 0; i < result.size(); ++i) result[i] = result[i] + in[r][i];
    return result;
  }

  // Every rank's first tensor, by rank.
  Tensors meet_all(Tensors& mine) {
    if (size() == 1) return {mine[0]};
    Tensors all;
    meet(mine, [&all](const std::vector<Tensors>& in) {
      for (const Tensors& ts : in) all.push_back(ts[0]);
      return in[0];
    }, /*copy_back=*/false);
    return all;
  }

  // Waits until every rank has arrived with its tensors; the last one
  // computes the result, which every rank copies into its tensors.
  void meet(Tensors& tensors, const Combine& combine, bool copy_back = true) {
    Meeting& m = *meeting_;
    std::unique_lock lock(m.mu);
    const uint64_t gen = m.generation;
    m.inputs[size_t(rank())].clear();
    for (const Tensor& t : tensors) m.inputs[size_t(rank())].push_back(t.clone());
    if (++m.arrived == size()) {
      m.all = m.inputs;
      m.result = combine(m.inputs);
      // On a GPU the sum is queued on this thread's stream; the other ranks
      // read it from theirs once woken.
      if (!m.result.empty() && m.result[0].is_cuda()) cuda::synchronize(m.result[0].device().index);
      m.arrived = 0;
      ++m.generation;
      m.cv.notify_all();
    } else {
      m.cv.wait(lock, [&] { return m.generation != gen; });
      if (!copy_back) combine(m.all);  // meet_all: every rank reads every input
    }
    // Nobody can start the next collective (and overwrite result) before
    // every rank, this one included, has arrived at it.
    if (copy_back)
      for (size_t i = 0; i < tensors.size(); ++i) tensors[i].copy_(m.result[i]);
  }

  std::shared_ptr<Meeting> meeting_;
};

inline std::vector<std::shared_ptr<ThreadGroup>> thread_groups(int size) {
  auto meeting = std::make_shared<Meeting>();
  meeting->inputs.resize(size_t(size));
  std::vector<std::shared_ptr<ThreadGroup>> groups;
  for (int r = 0; r < size; ++r) groups.push_back(std::make_shared<ThreadGroup>(r, size, meeting));
  return groups;
}

inline std::shared_ptr<ThreadGroup> solo() { return thread_groups(1)[0]; }

// Runs fn(rank) on one thread per rank and waits for all of them.
inline void on_every_rank(int size, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) threads.emplace_back(fn, r);
  for (auto& t : threads) t.join();
}

}  // namespace ddp::test
