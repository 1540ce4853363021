#pragma once
// Helpers shared by the host backends (mpi, gloo): CUDA tensors staged
// through host memory, and the f32 "wire" format for half precision.
//
// Note [Host staging]
// A CUDA tensor is copied to a pinned host tensor when the collective is submitted
// (on the caller's thread, after the kernels that produced it), the backend's
// worker runs on the host copy, and copies the result back into the CUDA
// tensor before completing the Work (Note [Work completion]). CPU tensors are
// used in place. So ranks without a GPU of their own, or several ranks
// sharing one GPU, can still run collectives on CUDA tensors.
//
// Note [Half precision on the wire]
// Neither MPI nor Gloo has a portable f16/bf16 reduction, so f16 and bf16
// travel as f32: converted into an f32 buffer, reduced (and divided for avg)
// in f32, converted back, rounding once (Note [Compute type]).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "ddp/dist/process_group.h"
#include "ddp/tensor/tensor.h"

namespace ddp::dist::detail {

struct Staged {
  Tensor user;  // what the caller passed
  Tensor host;  // the same tensor when on CPU, else its host copy
};
// copy_in: whether the data matters (inputs) or only the buffer (outputs).
Staged stage(const Tensor& t, bool copy_in);
std::vector<Staged> stage_all(const Tensors& ts, bool copy_in);
// Copies the host result back into a CUDA tensor; nothing for CPU tensors.
void unstage(const Staged& s);

inline std::byte* bytes(const Tensor& t) { return static_cast<std::byte*>(t.data_ptr()); }
// True when the host tensors lie back to back in memory, so a collective can
// use them as one buffer without a copy.
bool consecutive(const std::vector<Staged>& ts);

// The dtype a tensor travels as (Note [Half precision on the wire]).
DType wire_dtype(DType d);
void to_wire(DType d, const void* src, void* dst, int64_t n);
void from_wire(DType d, const void* src, void* dst, int64_t n);
// avg on a wire buffer: divides by size (f32 or f64; integer avg is refused
// by the argument checks).
void divide(DType wire, void* buf, int64_t n, int size);

// Groups of same-dtype tensors packed into one wire buffer each, in order of
// first appearance, so a coalesced reduction runs once per dtype.
struct WireGroup {
  DType dtype;
  DType wire;
  std::vector<size_t> members;  // indices into the staged tensors
  int64_t numel = 0;
  void* data = nullptr;               // the buffer to reduce in place
  std::unique_ptr<std::byte[]> owned;  // packed copy; null when data is the tensor itself
};
std::vector<WireGroup> pack_by_dtype(const std::vector<Staged>& ts);
// Copies packed results back into the member tensors (nothing when the group
// reduced a tensor in place).
void unpack(const WireGroup& g, const std::vector<Staged>& ts);

}  // namespace ddp::dist::detail
