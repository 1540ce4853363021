// Dataset base and default collation (dataset.h).

#include "ddp/data/dataset.h"

namespace ddp::data {

std::string ExampleSpec::describe() const {
  std::string s = fmt::format("input {}{}", dtype_name(input_dtype), shape_str(input_shape));
  if (has_target)
    s += fmt::format(", target {}{}", dtype_name(target_dtype), shape_str(target_shape));
  return s;
}

void Dataset::read(int64_t index, void* input, void* target) const {
  check_index(index);
  do_read(index, input, target);
}

void Dataset::read(int64_t index, void* input, void* target, SampleRng& rng) const {
  check_index(index);
  do_read_random(index, input, target, rng);
}

void Dataset::check_index(int64_t index) const {
  const int64_t n = size();
  if (index < 0 || index >= n)
    DDP_THROW(IndexError, "{}: index {} is out of range for a dataset of {} examples", describe(),
              index, n);
}

Example Dataset::get(int64_t index) const {
  Example e;
  e.input = Tensor::empty(spec_.input_shape, spec_.input_dtype);
  if (spec_.has_target) e.target = Tensor::empty(spec_.target_shape, spec_.target_dtype);
  read(index, e.input.data_ptr(), spec_.has_target ? e.target.data_ptr() : nullptr);
  return e;
}

Example collate(const Dataset& dataset, std::span<const int64_t> indices) {
  const ExampleSpec& spec = dataset.spec();
  const auto b = int64_t(indices.size());
  Shape in_shape{b};
  in_shape.insert(in_shape.end(), spec.input_shape.begin(), spec.input_shape.end());
  Example out;
  out.input = Tensor::empty(in_shape, spec.input_dtype);
  auto* in = static_cast<std::byte*>(out.input.data_ptr());
  std::byte* tg = nullptr;
  if (spec.has_target) {
    Shape t_shape{b};
    t_shape.insert(t_shape.end(), spec.target_shape.begin(), spec.target_shape.end());
    out.target = Tensor::empty(t_shape, spec.target_dtype);
    tg = static_cast<std::byte*>(out.target.data_ptr());
  }
  const size_t ib = spec.input_bytes(), tb = spec.target_bytes();
  for (int64_t i = 0; i < b; ++i)
    dataset.read(indices[size_t(i)], in + size_t(i) * ib, tg ? tg + size_t(i) * tb : nullptr);
  return out;
}

}  // namespace ddp::data
