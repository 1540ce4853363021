// Realistic CUDA samples for the elementwise and reduction entries of the op
// registry, shaped to reach every path of the hand kernels: the flat
// vectorised loop and its scalar tail (Note [CUDA elementwise paths]), an
// unaligned view, channels-last operands, strided views and broadcasting
// (32-bit fast division, Note [Fast index division]), two-pass row
// reductions (Note [CUDA two-pass reductions]) and column reductions with and
// without a second pass (Note [CUDA column reductions]). The entries
// themselves are the tensor layer's (op_registry_tensor_ops.cpp); this file
// only appends cuda_samples, so the op-consistency GPU test compares them
// with the CPU in every dtype of the entry but f64. The 64-bit index path
// needs a > 2 GiB tensor and is checked in cuda_kernel_paths_gpu_test.cpp.

#include <string>

#include "tensor/op_registry.h"

namespace ddp {

namespace {

using namespace op_samples;

// 2^20 + 3 elements: not a multiple of any vector width, so the tail runs.
constexpr int64_t kLong = (int64_t(1) << 20) + 3;

OpInfo& entry_named(std::vector<OpInfo>& ops, const std::string& name) {
  for (OpInfo& op : ops)
    if (op.name == name) return op;
  DDP_THROW(ValueError, "op_infos_cuda_paths: no entry named '{}'", name);
}

// A view of `shape` starting one element into its storage: dense, but its
// data pointer is not 16-byte aligned.
Tensor unaligned(const Shape& shape, DType dt, Device dev, Generator& gen) {
  const int64_t n = shape_numel(shape);
  return signed_values({n + 1}, dt, dev, gen).narrow(0, 1, n).view(shape);
}

// [n, c, h, w] stored NHWC.
Tensor channels_last(int64_t n, int64_t c, int64_t h, int64_t w, DType dt, Device dev,
                     Generator& gen) {
  return signed_values({n, h, w, c}, dt, dev, gen).permute({0, 3, 1, 2});
}

SampleFn binary_pair(std::function<Tensor(DType, Device, Generator&)> a,
                     std::function<Tensor(DType, Device, Generator&)> b) {
  return [a, b](DType dt, Device dev, Generator& gen) {
    Tensor x = a(dt, dev, gen);
    return Tensors{x, b(dt, dev, gen)};
  };
}

void add_binary_samples(OpInfo& op) {
  op.cuda_samples.push_back(binary_pair(  // flat, vectorised, with a tail
      [](DType dt, Device dev, Generator& gen) { return signed_values({kLong}, dt, dev, gen); },
      [](DType dt, Device dev, Generator& gen) { return signed_values({kLong}, dt, dev, gen); }));
  op.cuda_samples.push_back(binary_pair(  // flat but unaligned: one element at a time
      [](DType dt, Device dev, Generator& gen) { return unaligned({kLong}, dt, dev, gen); },
      [](DType dt, Device dev, Generator& gen) { return signed_values({kLong}, dt, dev, gen); }));
  op.cuda_samples.push_back(binary_pair(  // both channels-last: flat
      [](DType dt, Device dev, Generator& gen) { return channels_last(8, 64, 28, 28, dt, dev, gen); },
      [](DType dt, Device dev, Generator& gen) { return channels_last(8, 64, 28, 28, dt, dev, gen); }));
  op.cuda_samples.push_back(binary_pair(  // transposed and broadcast: strided, 32-bit
      [](DType dt, Device dev, Generator& gen) {
        return signed_values({1030, 1024}, dt, dev, gen).transpose(0, 1);
      },
      [](DType dt, Device dev, Generator& gen) { return signed_values({1030}, dt, dev, gen); }));
}

void add_unary_samples(OpInfo& op) {
  // run() applies the op to x and to x.transpose(0, 1) (strided).
  op.cuda_samples.push_back([](DType dt, Device dev, Generator& gen) {
    return Tensors{signed_values({1024, 1027}, dt, dev, gen)};
  });
  op.cuda_samples.push_back([](DType dt, Device dev, Generator& gen) {
    return Tensors{unaligned({1024, 1027}, dt, dev, gen)};
  });
}

void add_cast_samples(OpInfo& op) {
  op.cuda_samples.push_back([](DType dt, Device dev, Generator& gen) {
    return Tensors{signed_values({1024, 1027}, dt, dev, gen)};
  });
  op.cuda_samples.push_back([](DType dt, Device dev, Generator& gen) {
    return Tensors{unaligned({1024, 1027}, dt, dev, gen)};
  });
}

void add_reduction_samples(std::vector<OpInfo>& ops) {
  // sum: run() takes sum(x), sum(x, {1}), sum(x, {0, 2}, true), sum(x^T, {0}).
  OpInfo& sum_op = entry_named(ops, "sum");
  sum_op.cuda_samples.push_back([](DType dt, Device dev, Generator& gen) {
    // sum(x): one row of 1M elements, two passes.
    return Tensors{signed_values({64, 129, 130}, dt, dev, gen)};
  });
  sum_op.cuda_samples.push_back([](DType dt, Device dev, Generator& gen) {
    // Dim 1 outermost in memory: sum(x, {1}) reduces the columns of that view.
    return Tensors{signed_values({129, 64, 130}, dt, dev, gen).transpose(0, 1)};
  });
  // mean: mean(x), mean(x, {-1}), mean(x, {0, 1}, true): the last is a
  // column reduction of [32768, 96] in two passes.
  entry_named(ops, "mean").cuda_samples.push_back([](DType dt, Device dev, Generator& gen) {
    return Tensors{signed_values({4096, 8, 96}, dt, dev, gen)};
  });
  // sum_to(x, {5}): 1M rows of 5 columns, two passes; sum_to(x, {4, 1}).
  entry_named(ops, "sum_to").cuda_samples.push_back([](DType dt, Device dev, Generator& gen) {
    return Tensors{signed_values({262144, 4, 5}, dt, dev, gen)};
  });
  for (const char* name : {"max_dim", "min_dim"}) {
    // max(x, 1) over rows; max(x, 0, true): (value, index) column reduction
    // of [4096, 2112] in two passes, with many ties in f16/bf16/integers.
    entry_named(ops, name).cuda_samples.push_back([](DType dt, Device dev, Generator& gen) {
      return Tensors{signed_values({4096, 64, 33}, dt, dev, gen)};
    });
  }
  for (const char* name : {"max_all", "min_all", "argmax", "argmin"}) {
    // max(x): 1M elements in two passes; argmax(x, 1), argmax(x, -1, true).
    entry_named(ops, name).cuda_samples.push_back([](DType dt, Device dev, Generator& gen) {
      return Tensors{signed_values({128, 128, 65}, dt, dev, gen)};
    });
  }
}

void add_cuda_path_samples(std::vector<OpInfo>& ops) {
  for (const char* name : {"add", "mul", "maximum"}) add_binary_samples(entry_named(ops, name));
  for (const char* name : {"relu", "exp"}) add_unary_samples(entry_named(ops, name));
  add_binary_samples(entry_named(ops, "lt"));  // compare: bool out, narrower vectors
  add_cast_samples(entry_named(ops, "cast"));
  add_reduction_samples(ops);
}

const OpInfoRegistrar kCudaPathSamples("tensor/cuda_paths", add_cuda_path_samples);

}  // namespace

}  // namespace ddp
