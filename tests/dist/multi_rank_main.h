#pragma once
// The main() of a gtest program that runs on every rank of a job
// (pg_collectives_main, the DDP equality tests): every rank runs every test
// in the same order (their collectives must match), only rank 0 prints
// gtest's report, other ranks print just their failures, and every rank
// exits non-zero when any rank failed.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "ddp/dist/init.h"

namespace ddp::test {

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed())
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
  }

 private:
  int rank_;
};

// gtest's flags out of argv, then the job joined through init_process_group
// with the backend named by "--backend NAME" (or the default), on the CPU.
inline dist::World init_test_world(int& argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  dist::InitOptions opts;
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--backend" && i + 1 < argc) opts.backend = argv[++i];
  opts.device = Device::cpu();
  return dist::init_process_group(opts);
}

// Runs the tests on this rank and returns the exit status for all ranks.
// Resets `world` before returning, so that MPI_Finalize runs before exit
// (Note [MPI initialisation and finalisation]).
inline int run_tests_on_every_rank(dist::World& world, const char* program) {
  const int rank = world.rank();
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  int rc = RUN_ALL_TESTS();
  Tensor count = Tensor::full({1}, rc != 0 ? 1.0 : 0.0, TensorOptions(DType::i64));
  world.group->allreduce({count})->wait(std::chrono::milliseconds(120'000));
  const long long failed_ranks = count.item<int64_t>();
  if (rank == 0)
    std::printf("%s: backend %s, world size %d, %lld rank(s) failed\n", program,
                world.group->backend_name().c_str(), world.size(), failed_ranks);
  world = dist::World{};
  return failed_ranks == 0 ? 0 : 1;
}

}  // namespace ddp::test
