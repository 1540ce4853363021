// The state a joining rank receives from rank 0 of its new generation
// (Note [Elastic membership]).

#include "elastic_state.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <sstream>
#include <vector>

#include "ddp/autograd/grad_mode.h"
#include "ddp/core/error.h"

namespace ddp::parallel::detail {

namespace {

// The text travels as a u8 tensor, its length first, so that no side needs
// to know its size in advance.
std::string broadcast_text(dist::ProcessGroup& group, const std::string& text, int root) {
  const bool sending = group.rank() == root;
  Tensor len = Tensor::from_vector(std::vector<int64_t>{sending ? int64_t(text.size()) : 0}, {1});
  group.broadcast({len}, root)->wait(group.timeout());
  const int64_t n = len.item<int64_t>();
  Tensor blob = Tensor::zeros({n}, DType::u8);
  if (sending && n > 0) std::memcpy(blob.data<uint8_t>(), text.data(), size_t(n));
  if (n > 0) group.broadcast({blob}, root)->wait(group.timeout());
  return std::string(reinterpret_cast<const char*>(n > 0 ? blob.data<uint8_t>() : nullptr),
                     size_t(n));
}

std::string shape_text(const Tensor& t) {
  std::string s;
  for (int64_t d : t.shape()) s += (s.empty() ? "" : ",") + std::to_string(d);
  return "[" + s + "]";
}

std::vector<int64_t> parse_shape(const std::string& s) {
  std::vector<int64_t> dims;
  std::string inner = s.substr(1, s.size() - 2);
  std::stringstream in(inner);
  std::string part;
  while (std::getline(in, part, ',')) dims.push_back(std::stoll(part));
  return dims;
}

}  // namespace

int64_t broadcast_training_state(dist::ProcessGroup& group, io::Checkpoint& state, int64_t step,
                                 int root) {
  NoGradGuard no_grad;
  const bool sending = group.rank() == root;
  // The listing: "step N", then per section "section NAME", one
  // "tensor NAME SHAPE DTYPE" per tensor, and "generator NAME SEED OFFSET".
  std::vector<Tensor> tensors;
  std::string listing;
  if (sending) {
    listing = "step\t" + std::to_string(step) + "\n";
    for (const auto& section : state.sections()) {
      DDP_CHECK_T(NotImplementedError, !section.per_rank(),
                  "elastic: per-rank checkpoint section '{}' cannot be sent to a joining rank yet",
                  section.name);
      listing += "section\t" + section.name + "\n";
      for (const auto& [name, t] : section.save()) {
        tensors.push_back(t.contiguous());
        listing += fmt::format("tensor\t{}\t{}\t{}\n", name, shape_text(t), dtype_name(t.dtype()));
      }
    }
    for (const auto& [name, g] : state.generators())
      listing += fmt::format("generator\t{}\t{}\t{}\n", name, g->seed(), g->offset());
  }
  listing = broadcast_text(group, listing, root);

  // Parse it (also on the root, which thereby checks its own listing).
  struct Entry {
    std::string section, name;
  };
  std::vector<Entry> entries;
  std::map<std::string, std::pair<uint64_t, uint64_t>> generators;
  std::vector<std::string> section_order;
  int64_t sent_step = -1;
  std::stringstream lines(listing);
  std::string line;
  size_t k = 0;
  while (std::getline(lines, line)) {
    std::vector<std::string> f;
    std::stringstream fields(line);
    std::string field;
    while (std::getline(fields, field, '\t')) f.push_back(field);
    if (f.size() == 2 && f[0] == "step") {
      sent_step = std::stoll(f[1]);
    } else if (f.size() == 2 && f[0] == "section") {
      section_order.push_back(f[1]);
    } else if (f.size() == 4 && f[0] == "tensor" && !section_order.empty()) {
      entries.push_back({section_order.back(), f[1]});
      if (!sending)
        tensors.push_back(Tensor::empty(parse_shape(f[2]), TensorOptions(dtype_from_name(f[3]))));
      ++k;
    } else if (f.size() == 4 && f[0] == "generator") {
      generators[f[1]] = {std::stoull(f[2]), std::stoull(f[3])};
    } else {
      DDP_THROW(ValueError, "elastic: a malformed state listing line '{}'", line);
    }
  }
  DDP_CHECK(k == tensors.size() && sent_step >= 0, "elastic: the state listing does not match");

  // One broadcast per dtype: a coalesced collective takes one dtype.
  std::map<DType, Tensors> by_dtype;
  for (const Tensor& t : tensors) by_dtype[t.dtype()].push_back(t);
  for (auto& [dtype, ts] : by_dtype) group.broadcast(ts, root)->wait(group.timeout());
  if (sending) return step;

  std::map<std::string, TensorDict> dicts;
  for (size_t i = 0; i < entries.size(); ++i)
    dicts[entries[i].section].insert(entries[i].name, tensors[i]);
  for (const auto& section : state.sections()) {
    auto it = dicts.find(section.name);
    const bool listed = std::find(section_order.begin(), section_order.end(), section.name) !=
                        section_order.end();
    DDP_CHECK(listed, "elastic: the peer's state has no section '{}' (it has {})", section.name,
              fmt::join(section_order, ", "));
    section.load(it == dicts.end() ? TensorDict() : it->second);
  }
  for (const auto& [name, g] : state.generators()) {
    auto it = generators.find(name);
    DDP_CHECK(it != generators.end(), "elastic: the peer's state has no generator '{}'", name);
    g->set_state(it->second.first, it->second.second);
  }
  return sent_step;
}

std::string describe_section(const io::Checkpoint& state, const std::string& section) {
  std::string out;
  for (const auto& s : state.sections()) {
    if (s.name != section) continue;
    for (const auto& [name, t] : s.save())
      out += fmt::format("{} {} {}\n", name, shape_text(t), dtype_name(t.dtype()));
  }
  return out;
}

std::string first_difference(const std::string& ours, const std::string& theirs) {
  std::stringstream a(ours), b(theirs);
  std::string la, lb;
  for (int64_t i = 0;; ++i) {
    bool ha = bool(std::getline(a, la)), hb = bool(std::getline(b, lb));
    if (!ha && !hb) return "";
    if (ha && hb && la == lb) continue;
    return fmt::format("parameter {}: the job has {}, the joining rank has {}", i,
                       ha ? "'" + la + "'" : "(none)", hb ? "'" + lb + "'" : "(none)");
  }
}

}  // namespace ddp::parallel::detail
