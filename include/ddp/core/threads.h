#pragma once
// CPU threads, like torch.set_num_threads / torch.get_num_threads.
//
// Note [CPU threads]
// libddp's CPU work runs on thread pools it does not own: oneDNN's
// convolutions on the OpenMP runtime, matmuls on OpenBLAS's pool, and
// libddp's own element-wise, copy and max_pool2d kernels on the same OpenMP
// team when one is loaded (Note [CPU parallel loops]). set_num_threads()
// sizes both, so that N ranks on one machine can split its cores (the
// example trainers give each rank cores / local ranks). The setters are
// looked up at run time: libddp does not link OpenMP itself (oneDNN brings
// its runtime), and a build without oneDNN or OpenBLAS simply has fewer
// pools. OMP_NUM_THREADS, when set, is read by the runtimes themselves at
// start; set_num_threads() overrides it.

namespace ddp {

// Raises ValueError unless threads >= 1.
void set_num_threads(int threads);
// The OpenMP runtime's current limit when one is loaded, else the last
// value given to set_num_threads(), else the number of cores.
int get_num_threads();

}  // namespace ddp
