// Printable names of the op enums, generated from the lists in op_list.h so
// they can never fall out of step with them.

#include <cstddef>

#include "ddp/tensor/op_list.h"

namespace ddp {

namespace {
#define DDP_NAME_ENTRY(name, ...) #name,
constexpr const char* kUnaryNames[] = {DDP_FOR_EACH_UNARY_OP(DDP_NAME_ENTRY)};
constexpr const char* kBinaryNames[] = {DDP_FOR_EACH_BINARY_OP(DDP_NAME_ENTRY)};
constexpr const char* kCompareNames[] = {DDP_FOR_EACH_COMPARE_OP(DDP_NAME_ENTRY)};
constexpr const char* kReduceNames[] = {DDP_FOR_EACH_REDUCE_OP(DDP_NAME_ENTRY)};
#undef DDP_NAME_ENTRY

template <std::size_t N>
const char* lookup(const char* const (&names)[N], int i) {
  return i >= 0 && std::size_t(i) < N ? names[i] : "unknown";
}
}  // namespace

const char* op_name(UnaryOp op) { return lookup(kUnaryNames, int(op)); }
const char* op_name(BinaryOp op) { return lookup(kBinaryNames, int(op)); }
const char* op_name(CompareOp op) { return lookup(kCompareNames, int(op)); }
const char* op_name(ReductionOp op) { return lookup(kReduceNames, int(op)); }

}  // namespace ddp
