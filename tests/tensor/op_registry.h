#pragma once
// The list of every op, as the op-consistency test sees it: how to build
// sample inputs for a dtype and device, how to call the op, whether to
// gradcheck it, and which bad inputs it must refuse with which error. See
// Note [One list per op family] in op_list.h.
//
// Note [Registering ops from higher layers]
// The registry is a test fixture, so none of it is in libddp.so: the registry
// and every entry are built into a shared library of the tests,
// libddp_op_registry.so (tests/CMakeLists.txt), which ddp_add_test_dir links
// into every test executable. It takes each tests/<layer>/op_infos*.cpp and
// op_registry*.cpp; the entries call only libddp's public API. The tensor
// layer's tests own the registry (this header, op_registry.cpp and the
// tensor ops' entries in op_registry_tensor_ops.cpp), but most ops live
// above the tensor layer (conv2d in nn, the fused optimizer steps in optim,
// GradScaler in amp), and the tensor layer may not depend on those layers.
// So a higher layer registers its entries from its own test folder: a file
// of its own (tests/nn/op_infos_*.cpp, tests/optim/op_infos.cpp,
// tests/amp/op_infos.cpp) defines a function that appends OpInfos and a
// namespace-scope OpInfoRegistrar that hands that function to
// register_op_infos() while libddp_op_registry.so is loaded. op_registry()
// runs the tensor layer's own adders and then every registered one, once,
// on first use; the registered ones run in the order of their source
// names, so the registry's order does not depend on the (unspecified)
// order of static initialisation. The library is shared (a static one
// would drop the object files nothing calls into), so every registrar's
// object file is linked and runs. Registering after op_registry() was
// first read raises ValueError: the list it returned is final, and
// references into it stay valid.

#include <functional>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "ddp/core/error.h"
#include "ddp/tensor/generator.h"
#include "ddp/tensor/tensor.h"

namespace ddp {

// One input the op must refuse: `call` makes the bad inputs on `device` and
// calls the op; the test expects an error of the named ddp::Error subclass
// whose message contains `message_contains`. Make cases with bad_input<E>.
struct BadInputCase {
  std::string description;
  std::function<void(Device device)> call;
  std::string error_name;                              // "ShapeError"
  std::function<bool(const Error&)> is_expected_type;  // the error is an E
  std::string message_contains;
};

template <class E>
constexpr const char* error_type_name() {
  static_assert(std::is_base_of_v<Error, E>, "bad inputs raise ddp::Error subclasses");
  if constexpr (std::is_same_v<E, ShapeError>) return "ShapeError";
  else if constexpr (std::is_same_v<E, DTypeError>) return "DTypeError";
  else if constexpr (std::is_same_v<E, DeviceError>) return "DeviceError";
  else if constexpr (std::is_same_v<E, IndexError>) return "IndexError";
  else if constexpr (std::is_same_v<E, ValueError>) return "ValueError";
  else if constexpr (std::is_same_v<E, NotImplementedError>) return "NotImplementedError";
  else return "Error";
}

template <class E>
BadInputCase bad_input(std::string description, std::string message_contains,
                       std::function<void(Device)> call) {
  BadInputCase c;
  c.description = std::move(description);
  c.call = std::move(call);
  c.error_name = error_type_name<E>();
  c.is_expected_type = [](const Error& e) {
    if constexpr (std::is_same_v<E, Error>) return true;
    else return dynamic_cast<const E*>(&e) != nullptr;
  };
  c.message_contains = std::move(message_contains);
  return c;
}

struct OpInfo {
  std::string name;
  std::vector<DType> dtypes;  // dtypes the op supports (tested on every backend)
  bool differentiable = false;
  // Inputs for one test case; float inputs are drawn from gen so the same
  // generator state yields the same values on every device.
  std::function<Tensors(DType dtype, Device device, Generator& gen)> sample;
  // Runs the op on the sample's inputs; returns its outputs.
  std::function<Tensors(const Tensors& inputs)> run;
  // Of the sample's inputs, which gradcheck differentiates (the others are
  // indices, masks, ...). The CPU-vs-CUDA comparison compares their
  // gradients too.
  std::vector<int> grad_inputs;
  // Bad inputs and the errors they must raise, on every backend.
  std::vector<BadInputCase> bad_inputs;
  // Realistic shapes (attention at T = 1024, many-row layer norms, ...) for
  // the CPU-vs-CUDA comparison only, in the op's dtypes but f64; the small
  // `sample` serves the CPU checks and gradcheck.
  std::vector<std::function<Tensors(DType, Device, Generator&)>> cuda_samples;
  // CPU-vs-CUDA bound per dtype on max |cuda − cpu| / max(1, max |cpu|), for
  // outputs and gradients that are long sums (convolutions, attention,
  // norms, optimizer steps), where elementwise relative error means nothing
  // near a cancelled zero. Dtypes not listed use the test's elementwise
  // tolerance.
  std::map<DType, double> cuda_scaled_tolerance;
};

const std::vector<OpInfo>& op_registry();
const OpInfo& find_op(const std::string& name);  // throws ValueError when unknown

// See Note [Registering ops from higher layers]. `source` names the
// registering file ("nn/conv") and orders the registered adders.
using OpInfoAdder = void (*)(std::vector<OpInfo>& ops);
void register_op_infos(const char* source, OpInfoAdder add);
struct OpInfoRegistrar {
  OpInfoRegistrar(const char* source, OpInfoAdder add) { register_op_infos(source, add); }
};

// Helpers for writing entries, shared by every layer's adders.
namespace op_samples {

using SampleFn = std::function<Tensors(DType, Device, Generator&)>;
using RunFn = std::function<Tensors(const Tensors&)>;

inline TensorOptions opts(DType dt, Device dev) { return TensorOptions().dtype(dt).device(dev); }
// Values around zero: floats in [-2, 2), integers in (-5, 5) (u8: [0, 10)),
// bool: draw < 0.5. See Note [Sample inputs].
Tensor signed_values(const Shape& shape, DType dt, Device dev, Generator& gen);
// Floats in [lo, hi), drawn in f32 on the CPU, then converted and moved.
Tensor uniform_values(const Shape& shape, double lo, double hi, DType dt, Device dev,
                      Generator& gen);
// Values away from zero, for log, sqrt, rsqrt, pow and divisors: floats in
// [0.5, 2), integers in [1, 5).
Tensor positive_values(const Shape& shape, DType dt, Device dev, Generator& gen);
// Fixed values (the same on every device), e.g. indices.
Tensor fixed_values(const std::vector<int64_t>& values, const Shape& shape, DType dt, Device dev);
// A 0-element tensor that only carries the dtype and device to run().
Tensor proto(DType dt, Device dev);
// Zeros, for bad-input cases.
inline Tensor zeros(const Shape& shape, Device dev, DType dt = DType::f32) {
  return Tensor::zeros(shape, opts(dt, dev));
}
// A sample of signed_values tensors, one per shape, in order.
SampleFn signed_samples(std::vector<Shape> shapes);

OpInfo make(std::string name, std::vector<DType> dtypes, SampleFn sample, RunFn run,
            std::vector<int> grad_inputs = {});

inline const std::vector<DType> kFloats = {DType::f32, DType::f64, DType::f16, DType::bf16};

}  // namespace op_samples

}  // namespace ddp
