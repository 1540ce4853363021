// See Note [Collective check mode] in collective_check.h.

#include "collective_check.h"

#include <algorithm>
#include <cstring>

#include "ddp/core/error.h"
#include "roll_call.h"

namespace ddp::dist::detail {

std::string describe_call(const std::string& op, const std::string& args, const Tensors& tensors) {
  std::string s = op + "(";
  if (!args.empty()) s += args + "; ";
  if (tensors.empty()) {
    s += "no tensors";
  } else {
    s += dtype_name(tensors.front().dtype());
    for (const Tensor& t : tensors) {
      s += "; [";
      for (size_t d = 0; d < t.shape().size(); ++d)
        s += (d ? ", " : "") + std::to_string(t.shape()[d]);
      s += "]";
      // Layouts must agree across ranks too (Note [Dense tensors in collectives]).
      if (!t.is_contiguous()) s += fmt::format("/strides[{}]", fmt::join(t.strides(), ", "));
    }
  }
  return s + ")";
}

Tensor encode_call(const std::string& description) {
  std::vector<uint8_t> bytes(kCallDescriptionBytes, 0);
  std::memcpy(bytes.data(), description.data(),
              std::min(description.size(), kCallDescriptionBytes - 1));
  return Tensor::from_vector(bytes, {int64_t(kCallDescriptionBytes)}, DType::u8);
}

std::string decode_call(const Tensor& encoded) {
  const auto bytes = encoded.to_vector<uint8_t>();
  const auto end = std::find(bytes.begin(), bytes.end(), uint8_t(0));
  return std::string(bytes.begin(), end);
}

std::string mismatch_message(uint64_t seq, const std::vector<std::string>& per_rank) {
  if (std::all_of(per_rank.begin(), per_rank.end(),
                  [&](const std::string& c) { return c == per_rank.front(); }))
    return "";
  // Group the ranks by what they passed, in rank order of first appearance.
  std::vector<std::pair<int, std::string>> keyed;
  for (int r = 0; r < int(per_rank.size()); ++r) keyed.push_back({r, per_rank[size_t(r)]});
  const auto groups = group_ranks_by_key(keyed);
  std::string s = fmt::format("collective #{} differs across ranks (DDP_DEBUG=detail): ", seq);
  for (size_t i = 0; i < groups.size(); ++i)
    s += fmt::format("{}{} passed {}", i ? "; " : "", ranks_phrase(groups[i].second),
                     groups[i].first);
  return s;
}

}  // namespace ddp::dist::detail
