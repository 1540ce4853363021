#pragma once
// The list of every op, as the op-consistency test sees it: how to build
// sample inputs for a dtype and device, how to call the op, and whether to
// gradcheck it. See Note [One list per op family] in op_list.h.

#include <functional>
#include <string>
#include <vector>

#include "ddp/tensor/generator.h"
#include "ddp/tensor/tensor.h"

namespace ddp {

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
  // indices, masks, ...).
  std::vector<int> grad_inputs;
};

const std::vector<OpInfo>& op_registry();
const OpInfo& find_op(const std::string& name);  // throws ValueError when unknown

}  // namespace ddp
