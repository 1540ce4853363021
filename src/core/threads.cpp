// See Note [CPU threads] in ddp/core/threads.h and Note [CPU parallel
// loops] in core/parallel.h.

#include "ddp/core/threads.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>

#include "core/parallel.h"
#include "ddp/core/env.h"
#include "ddp/core/error.h"

namespace ddp {

namespace {

using SetThreads = void (*)(int);
using GetThreads = int (*)();

// A function of a library already loaded into the process, or null.
template <class Fn>
Fn loaded_symbol(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));
}

std::atomic<int> last_set{0};

// The OpenMP runtime's entry points, looked up once (null without a runtime).
struct OpenMp {
  using Parallel = void (*)(void (*)(void*), void*, unsigned, unsigned);
  Parallel parallel = loaded_symbol<Parallel>("GOMP_parallel");
  GetThreads thread_num = loaded_symbol<GetThreads>("omp_get_thread_num");
  GetThreads num_threads = loaded_symbol<GetThreads>("omp_get_num_threads");
  GetThreads max_threads = loaded_symbol<GetThreads>("omp_get_max_threads");
  GetThreads in_parallel = loaded_symbol<GetThreads>("omp_in_parallel");
  bool usable() const {
    return parallel && thread_num && num_threads && max_threads && in_parallel;
  }
};
const OpenMp& openmp() {
  static const OpenMp omp;
  return omp;
}

struct LoopJob {
  int64_t n;
  const std::function<void(int64_t, int64_t)>* fn;
  std::mutex mu;
  std::exception_ptr error;
};

void run_chunk(void* data) {
  auto* job = static_cast<LoopJob*>(data);
  const OpenMp& omp = openmp();
  const int64_t t = omp.thread_num(), nt = omp.num_threads();
  const int64_t begin = job->n * t / nt, end = job->n * (t + 1) / nt;
  if (begin >= end) return;
  try {
    (*job->fn)(begin, end);
  } catch (...) {
    std::lock_guard<std::mutex> lock(job->mu);
    if (!job->error) job->error = std::current_exception();
  }
}

}  // namespace

int parallel_threads(int64_t n, int64_t grain) {
  const OpenMp& omp = openmp();
  if (!omp.usable() || omp.in_parallel()) return 1;
  const int64_t by_size = n / std::max<int64_t>(grain, 1);
  if (by_size < 2) return 1;
  // Read per large loop (not cached) so that a process can switch it.
  if (!env_bool("DDP_CPU_PARALLEL_KERNELS", true)) return 1;
  return int(std::max<int64_t>(1, std::min<int64_t>(omp.max_threads(), by_size)));
}

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  const int threads = parallel_threads(n, grain);
  if (threads <= 1) {
    fn(0, n);
    return;
  }
  LoopJob job{n, &fn, {}, {}};
  openmp().parallel(run_chunk, &job, unsigned(threads), 0);
  if (job.error) std::rethrow_exception(job.error);
}

void set_num_threads(int threads) {
  DDP_CHECK(threads >= 1, "set_num_threads: threads must be at least 1, got {}", threads);
  if (auto f = loaded_symbol<SetThreads>("omp_set_num_threads")) f(threads);
  if (auto f = loaded_symbol<SetThreads>("openblas_set_num_threads")) f(threads);
  last_set = threads;
}

int get_num_threads() {
  if (auto f = loaded_symbol<GetThreads>("omp_get_max_threads")) return f();
  if (int n = last_set.load(); n > 0) return n;
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace ddp
