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
  Tensors result;
};

class ThreadGroup : public dist::ProcessGroup {
 public:
  ThreadGroup(int rank, int size, std::shared_ptr<Meeting> meeting)
      : ProcessGroup(rank, size), meeting_(std::move(meeting)) {}
  std::string backend_name() const override { return "threads"; }
  std::atomic<int> allreduces{0};

 protected:
  dist::WorkPtr do_allreduce(Tensors& tensors, dist::ReduceOp op) override {
    EXPECT_EQ(op, dist::ReduceOp::sum);
    ++allreduces;
    if (size() > 1) meet(tensors);
    return dist::completed_work("allreduce", tensors);
  }
  dist::WorkPtr do_broadcast(Tensors&, int) override { return unsupported(); }
  dist::WorkPtr do_reduce(Tensors&, int, dist::ReduceOp) override { return unsupported(); }
  dist::WorkPtr do_allgather(Tensors&, const Tensor&) override { return unsupported(); }
  dist::WorkPtr do_reduce_scatter(const Tensor&, Tensors&, dist::ReduceOp) override {
    return unsupported();
  }
  dist::WorkPtr do_all_to_all(const Tensor&, const Tensor&) override { return unsupported(); }
  dist::WorkPtr do_barrier() override { return unsupported(); }
  dist::WorkPtr do_send(const Tensor&, int, int) override { return unsupported(); }
  dist::WorkPtr do_recv(const Tensor&, int, int) override { return unsupported(); }

 private:
  static dist::WorkPtr unsupported() {
    DDP_THROW(NotImplementedError, "ThreadGroup: allreduce only");
  }

  void meet(Tensors& tensors) {
    Meeting& m = *meeting_;
    std::unique_lock lock(m.mu);
    const uint64_t gen = m.generation;
    m.inputs[size_t(rank())].clear();
    for (const Tensor& t : tensors) m.inputs[size_t(rank())].push_back(t.clone());
    if (++m.arrived == size()) {
      m.result = m.inputs[0];
      for (size_t r = 1; r < m.inputs.size(); ++r)
        for (size_t i = 0; i < m.result.size(); ++i) m.result[i] = m.result[i] + m.inputs[r][i];
      // On a GPU the sum is queued on this thread's stream; the other ranks
      // read it from theirs once woken.
      if (!m.result.empty() && m.result[0].is_cuda()) cuda::synchronize(m.result[0].device().index);
      m.arrived = 0;
      ++m.generation;
      m.cv.notify_all();
    } else {
      m.cv.wait(lock, [&] { return m.generation != gen; });
    }
    // Nobody can start the next allreduce (and overwrite result) before
    // every rank, this one included, has arrived at it.
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
