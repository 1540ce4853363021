// See Note [CPU threads] in ddp/core/threads.h.

#include "ddp/core/threads.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <thread>

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

}  // namespace

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
