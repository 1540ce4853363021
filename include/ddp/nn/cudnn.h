#pragma once
// cuDNN settings, like torch.backends.cudnn's flags. They exist in every
// build (a CPU-only build has no cuDNN to steer, and the switches are then
// plain process-wide flags), so a program sets them without #ifdefs.
//
// Note [cuDNN TF32]
// On Ampere and later GPUs an f32 convolution can run on tensor cores in
// TF32: inputs rounded to 10 mantissa bits (about 3 decimal digits), products
// summed in f32. It is several times faster than the plain f32 (FMA) path
// and, like PyTorch (torch.backends.cudnn.allow_tf32 = True), libddp allows
// it for f32 convolutions by default. set_allow_tf32(false), or
// DDP_CUDNN_ALLOW_TF32=0 in the environment, keeps f32 convolutions on
// engines without tensor cores, so CUDA agrees with the CPU to f32
// rounding. Implemented in the engine choice (Note [cuDNN convolution]):
// with TF32 off, every cuDNN engine carrying the TENSOR_CORE numerical note
// is removed from the candidates of an f32 convolution. f16/bf16 always use
// tensor cores and f64 never does, so the switch changes f32 only. The
// switch is read at each call and is part of the plan-cache key, so
// flipping it takes effect on the next convolution. It does not touch the
// cuBLAS matmuls, which never use TF32 (Note [cuBLAS bmm layouts]).

namespace ddp::nn::cudnn {

// Whether f32 convolutions may use TF32 tensor cores. Default: true, or the
// value of DDP_CUDNN_ALLOW_TF32 (1/0, true/false, yes/no, on/off; any other
// value raises ValueError on first use).
bool allow_tf32();
void set_allow_tf32(bool allow);

// Sets allow_tf32 for a scope and restores the previous value (tests, or a
// block that needs f32-exact convolutions). Process-wide, not per thread.
class AllowTf32Guard {
 public:
  explicit AllowTf32Guard(bool allow) : previous_(allow_tf32()) { set_allow_tf32(allow); }
  ~AllowTf32Guard() { set_allow_tf32(previous_); }
  AllowTf32Guard(const AllowTf32Guard&) = delete;
  AllowTf32Guard& operator=(const AllowTf32Guard&) = delete;

 private:
  bool previous_;
};

namespace detail {
// Forgets the flag, so the next allow_tf32() reads DDP_CUDNN_ALLOW_TF32
// again (tests of the variable).
void reset_allow_tf32();
}  // namespace detail

// DDP_CUDNN_DETERMINISTIC=1 (read once): convolutions use only cuDNN
// engines without the NONDETERMINISTIC numerical note, so repeated runs
// give bit-identical results (and a convolution with no such engine raises
// CudnnError). Default: false.
bool deterministic();

}  // namespace ddp::nn::cudnn
