// The op registry: one OpInfo per public op, which the op-consistency tests
// (tests/tensor/op_consistency*_test.cpp) run on every backend and dtype,
// gradcheck, and feed bad inputs. The tensor layer's entries are in
// op_registry_tensor_ops.cpp (elementwise ones generated from op_list.h;
// Note [One list per op family]); higher layers register theirs from their
// own test folders (Note [Registering ops from higher layers] in
// op_registry.h).
//
// Note [Sample inputs]
// Samples are drawn in f32 on the CPU from the test's Generator and then
// converted to the dtype and moved to the device, so the CPU and CUDA runs of
// one case see bit-identical inputs whatever the dtype (a random kernel of
// another dtype or device could round differently). Integer samples are the
// truncated draws of a wider range, bool samples are draw < 0.5.

#include "tensor/op_registry.h"

#include <algorithm>
#include <mutex>
#include <set>
#include <string>

#include "ddp/tensor/ops.h"

namespace ddp {

namespace detail {
void add_tensor_op_infos(std::vector<OpInfo>& ops);  // op_registry_tensor_ops.cpp
}

namespace op_samples {

SampleFn signed_samples(std::vector<Shape> shapes) {
  return [shapes = std::move(shapes)](DType dt, Device dev, Generator& gen) {
    Tensors t;
    for (const Shape& s : shapes) t.push_back(signed_values(s, dt, dev, gen));
    return t;
  };
}

Tensor signed_values(const Shape& shape, DType dt, Device dev, Generator& gen) {
  if (dt == DType::bool_) return lt(rand(shape, DType::f32, &gen), 0.5).to(dev);
  double lo = -2, hi = 2;
  if (dt == DType::u8) lo = 0, hi = 10;
  else if (!is_floating(dt)) lo = -5, hi = 5;
  return uniform(shape, lo, hi, DType::f32, &gen).to(dev, dt);
}

Tensor uniform_values(const Shape& shape, double lo, double hi, DType dt, Device dev,
                      Generator& gen) {
  return uniform(shape, lo, hi, DType::f32, &gen).to(dev, dt);
}

Tensor positive_values(const Shape& shape, DType dt, Device dev, Generator& gen) {
  if (dt == DType::bool_) return Tensor::ones(shape, opts(dt, dev));
  double lo = is_floating(dt) ? 0.5 : 1, hi = is_floating(dt) ? 2 : 5;
  return uniform(shape, lo, hi, DType::f32, &gen).to(dev, dt);
}

Tensor fixed_values(const std::vector<int64_t>& values, const Shape& shape, DType dt, Device dev) {
  return Tensor::from_vector(values, shape, opts(dt, dev));
}

Tensor proto(DType dt, Device dev) { return Tensor::empty({0}, opts(dt, dev)); }

OpInfo make(std::string name, std::vector<DType> dtypes, SampleFn sample, RunFn run,
            std::vector<int> grad_inputs) {
  OpInfo info;
  info.name = std::move(name);
  info.dtypes = std::move(dtypes);
  info.differentiable = !grad_inputs.empty();
  info.sample = std::move(sample);
  info.run = std::move(run);
  info.grad_inputs = std::move(grad_inputs);
  return info;
}

}  // namespace op_samples

namespace {

struct Registrations {
  std::mutex mu;
  std::vector<std::pair<std::string, OpInfoAdder>> adders;
  bool frozen = false;  // op_registry() has been built
};

// Constructed on first use, so registrars in any translation unit may call
// it during static initialisation.
Registrations& registrations() {
  static Registrations r;
  return r;
}

std::vector<OpInfo> build_registry() {
  std::vector<OpInfo> ops;
  detail::add_tensor_op_infos(ops);
  Registrations& r = registrations();
  std::lock_guard<std::mutex> lock(r.mu);
  r.frozen = true;
  auto adders = r.adders;
  std::stable_sort(adders.begin(), adders.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [source, add] : adders) add(ops);
  std::set<std::string> seen;
  for (const OpInfo& op : ops)
    DDP_CHECK(seen.insert(op.name).second, "op_registry: two entries are named '{}'", op.name);
  return ops;
}

}  // namespace

void register_op_infos(const char* source, OpInfoAdder add) {
  Registrations& r = registrations();
  std::lock_guard<std::mutex> lock(r.mu);
  DDP_CHECK(!r.frozen,
            "register_op_infos({}): op_registry() was already read; register with a "
            "namespace-scope OpInfoRegistrar (Note [Registering ops from higher layers])",
            source);
  DDP_CHECK(add != nullptr, "register_op_infos({}): null adder", source);
  r.adders.emplace_back(source, add);
}

const std::vector<OpInfo>& op_registry() {
  static const std::vector<OpInfo> ops = build_registry();
  return ops;
}

const OpInfo& find_op(const std::string& name) {
  const auto& ops = op_registry();
  auto it = std::find_if(ops.begin(), ops.end(), [&](const OpInfo& o) { return o.name == name; });
  if (it == ops.end()) DDP_THROW(ValueError, "find_op: no op named '{}' in the registry", name);
  return *it;
}

}  // namespace ddp
