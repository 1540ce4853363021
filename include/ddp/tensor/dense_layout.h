#pragma once
// Dense tensors whose elements fill one block of memory in some dimension
// order (contiguous, channels-last, any permutation): code that works on
// the elements regardless of their order — a sum across ranks, an
// optimizer's elementwise update, a copy between tensors of one layout —
// can treat such a tensor as its flat block (src/tensor/memory_format.cpp).
//
// Note [Dense tensors in collectives]
// Collectives move and reduce bytes as they lie in memory. That is right for
// any dense tensor as long as every tensor the bytes travel between shares
// one layout: the two sides of an allgather, reduce_scatter or all_to_all
// on a rank (checked: ProcessGroup refuses a layout mismatch), and one
// tensor on every rank (not checked per call, as in PyTorch; DDP and ZeRO
// verify their parameters' layouts across ranks once, at construction, and
// the collective check mode, DDP_DEBUG=detail, compares strides per call).
// A non-dense view (a slice with gaps, an expanded tensor) has no such block
// and is refused with a message that says to copy it first.

#include "ddp/tensor/tensor.h"

namespace ddp {

// Defined, and either empty or dense in some dimension order.
bool is_dense(const Tensor& t);
// a and b (of one shape) lay their elements out in the same order, so a
// byte copy of one block into the other copies element i to element i.
bool same_dense_layout(const Tensor& a, const Tensor& b);
// A 1-D view of a dense tensor's block, in memory order (shares storage;
// outside autograd). ValueError naming `who` when t is not dense.
Tensor flat_view(const Tensor& t, const char* who);

}  // namespace ddp
