#pragma once
// The collective check mode (DDP_DEBUG=detail).
//
// Note [Collective check mode]
// Ranks that issue different collectives (another op, dtype, shape, root or
// reduce op) at the same point either hang or silently combine unrelated
// data. With DDP_DEBUG=detail, ProcessGroup first gathers every rank's
// description of the call it is about to issue, through the same group (an
// allgather of a fixed-size u8 tensor that is not itself recorded or
// checked), and every rank compares them. A mismatch raises ValueError on
// every rank, naming each rank and what it passed, before any data moves.
// It costs one small allgather per collective, so it is off by default.
// A rank that issues no collective at all still leaves the others waiting
// (up to the timeout, then the desync report names it).

#include <string>
#include <vector>

#include "ddp/tensor/tensor.h"

namespace ddp::dist::detail {

// The bytes of a description on the wire: a fixed size, so that every rank's
// allgather matches even when the descriptions differ.
constexpr size_t kCallDescriptionBytes = 256;

// "allreduce(op=sum; f32; [4, 3])": op, args, dtype and shapes.
std::string describe_call(const std::string& op, const std::string& args, const Tensors& tensors);
// A u8 tensor of kCallDescriptionBytes (truncated, zero-padded), and back.
Tensor encode_call(const std::string& description);
std::string decode_call(const Tensor& encoded);
// "" when every rank passed the same; else "collective #7 differs across
// ranks (DDP_DEBUG=detail): ranks 0, 2 passed allreduce(...); rank 1 passed
// allreduce(...)".
std::string mismatch_message(uint64_t seq, const std::vector<std::string>& per_rank);

}  // namespace ddp::dist::detail
