// The op registry: one OpInfo per public op, which the op-consistency test
// (tests/tensor/op_consistency_test.cpp) runs on every backend and dtype and
// gradchecks. Elementwise entries are generated from op_list.h, so a new line
// there is tested without touching this file. See Note [One list per op
// family].
//
// Note [Sample inputs]
// Samples are drawn in f32 on the CPU from the test's Generator and then
// converted to the dtype and moved to the device, so the CPU and CUDA runs of
// one case see bit-identical inputs whatever the dtype (a random kernel of
// another dtype or device could round differently). Integer samples are the
// truncated draws of a wider range, bool samples are draw < 0.5.

#include <algorithm>
#include <string>

#include "ddp/tensor/op_registry.h"
#include "ddp/tensor/ops.h"

namespace ddp {

namespace {

const std::vector<DType> kFloats = {DType::f32, DType::f64, DType::f16, DType::bf16};
const std::vector<DType> kNumeric = {DType::f32, DType::f64, DType::f16, DType::bf16,
                                     DType::i32, DType::i64};
const std::vector<DType> kAll(std::begin(kAllDTypes), std::end(kAllDTypes));

TensorOptions opts(DType dt, Device dev) { return TensorOptions().dtype(dt).device(dev); }

// Values around zero: floats in [-2, 2), integers in (-5, 5) (u8: [0, 10)).
Tensor signed_sample(const Shape& shape, DType dt, Device dev, Generator& gen) {
  if (dt == DType::bool_) return lt(rand(shape, DType::f32, &gen), 0.5).to(dev);
  double lo = -2, hi = 2;
  if (dt == DType::u8) lo = 0, hi = 10;
  else if (!is_floating(dt)) lo = -5, hi = 5;
  return uniform(shape, lo, hi, DType::f32, &gen).to(dev, dt);
}

// Values away from zero, for log, sqrt, rsqrt, pow and divisors: floats in
// [0.5, 2), integers in [1, 5).
Tensor positive_sample(const Shape& shape, DType dt, Device dev, Generator& gen) {
  if (dt == DType::bool_) return Tensor::ones(shape, opts(dt, dev));
  double lo = is_floating(dt) ? 0.5 : 1, hi = is_floating(dt) ? 2 : 5;
  return uniform(shape, lo, hi, DType::f32, &gen).to(dev, dt);
}

// Fixed index values (the same on every device).
Tensor index_tensor(const std::vector<int64_t>& values, const Shape& shape, DType dt, Device dev) {
  return Tensor::from_vector(values, shape, opts(dt, dev));
}

// A 0-element tensor that only carries the dtype and device to run().
Tensor proto(DType dt, Device dev) { return Tensor::empty({0}, opts(dt, dev)); }

using SampleFn = std::function<Tensors(DType, Device, Generator&)>;
using RunFn = std::function<Tensors(const Tensors&)>;

OpInfo make(std::string name, std::vector<DType> dtypes, SampleFn sample, RunFn run,
            std::vector<int> grad_inputs = {}) {
  OpInfo info;
  info.name = std::move(name);
  info.dtypes = std::move(dtypes);
  info.differentiable = !grad_inputs.empty();
  info.sample = std::move(sample);
  info.run = std::move(run);
  info.grad_inputs = std::move(grad_inputs);
  return info;
}

bool needs_positive_input(const std::string& unary_name) {
  return unary_name == "log" || unary_name == "sqrt" || unary_name == "rsqrt";
}

void add_elementwise(std::vector<OpInfo>& ops) {
  // Unary: a contiguous and a transposed (strided) input.
#define DDP_UNARY_INFO(name, ...)                                                              \
  {                                                                                           \
    bool positive = needs_positive_input(#name);                                              \
    ops.push_back(make(                                                                       \
        #name, kNumeric,                                                                      \
        [positive](DType dt, Device dev, Generator& gen) {                                    \
          return Tensors{positive ? positive_sample({3, 4}, dt, dev, gen)                     \
                                  : signed_sample({3, 4}, dt, dev, gen)};                     \
        },                                                                                    \
        [](const Tensors& in) {                                                               \
          return Tensors{ddp::name(in[0]), ddp::name(in[0].transpose(0, 1))};                 \
        },                                                                                    \
        {0}));                                                                                \
  }
  DDP_FOR_EACH_UNARY_OP(DDP_UNARY_INFO)
#undef DDP_UNARY_INFO

  // Binary: broadcasting [3, 1, 4] with [5, 4], and a scalar operand.
#define DDP_BINARY_INFO(name, ...)                                                        \
  ops.push_back(make(                                                                     \
      #name, kNumeric,                                                                    \
      [](DType dt, Device dev, Generator& gen) {                                          \
        Tensor a = signed_sample({3, 1, 4}, dt, dev, gen);                                \
        Tensor b = std::string(#name) == "div" ? positive_sample({5, 4}, dt, dev, gen)    \
                                               : signed_sample({5, 4}, dt, dev, gen);     \
        return Tensors{a, b};                                                             \
      },                                                                                  \
      [](const Tensors& in) {                                                             \
        return Tensors{ddp::name(in[0], in[1]), ddp::name(in[0], 1.5)};                   \
      },                                                                                  \
      {0, 1}));
  DDP_FOR_EACH_BINARY_OP(DDP_BINARY_INFO)
#undef DDP_BINARY_INFO

  // Comparisons: broadcasting, and a scalar operand.
#define DDP_COMPARE_INFO(name, ...)                                                          \
  ops.push_back(make(                                                                        \
      #name, kAll,                                                                           \
      [](DType dt, Device dev, Generator& gen) {                                             \
        return Tensors{signed_sample({3, 1, 4}, dt, dev, gen),                               \
                       signed_sample({5, 4}, dt, dev, gen)};                                 \
      },                                                                                     \
      [](const Tensors& in) { return Tensors{ddp::name(in[0], in[1]), ddp::name(in[0], 1.0)}; }));
  DDP_FOR_EACH_COMPARE_OP(DDP_COMPARE_INFO)
#undef DDP_COMPARE_INFO

  ops.push_back(make(
      "where", kAll,
      [](DType dt, Device dev, Generator& gen) {
        return Tensors{signed_sample({3, 4}, DType::bool_, dev, gen),
                       signed_sample({2, 3, 4}, dt, dev, gen), signed_sample({4}, dt, dev, gen)};
      },
      [](const Tensors& in) {
        return Tensors{where(in[0], in[1], in[2]), where(in[0], 1.5, in[2])};
      },
      {1, 2}));
  ops.push_back(make(
      "masked_fill", kAll,
      [](DType dt, Device dev, Generator& gen) {
        return Tensors{signed_sample({3, 4}, dt, dev, gen),
                       signed_sample({4}, DType::bool_, dev, gen)};
      },
      [](const Tensors& in) { return Tensors{masked_fill(in[0], in[1], -1.5)}; }, {0}));
  ops.push_back(make(
      "pow", kNumeric,
      [](DType dt, Device dev, Generator& gen) {
        return Tensors{positive_sample({3, 4}, dt, dev, gen)};
      },
      [](const Tensors& in) {
        const Tensor& x = in[0];
        Tensors r{pow(x, 3.0), pow(x, 0.5), pow(x, 2.5), pow(x, 1.0)};
        if (is_floating(x.dtype())) r.push_back(pow(x, -2.0));  // integers: ValueError
        return r;
      },
      {0}));
}

void add_reductions(std::vector<OpInfo>& ops) {
  auto x345 = [](DType dt, Device dev, Generator& gen) {
    return Tensors{signed_sample({3, 4, 5}, dt, dev, gen)};
  };
  ops.push_back(make("sum", kAll, x345, [](const Tensors& in) {
    const Tensor& x = in[0];
    return Tensors{sum(x), sum(x, {1}), sum(x, {0, 2}, true), sum(x.transpose(0, 2), {0})};
  }, {0}));
  ops.push_back(make("mean", kFloats, x345, [](const Tensors& in) {
    const Tensor& x = in[0];
    return Tensors{mean(x), mean(x, {-1}), mean(x, {0, 1}, true)};
  }, {0}));
  ops.push_back(make("var", kFloats, x345, [](const Tensors& in) {
    const Tensor& x = in[0];
    return Tensors{var(x), var(x, {1}), var(x, {0, 2}, 0, true)};
  }, {0}));
  ops.push_back(make("sum_to", kNumeric, x345, [](const Tensors& in) {
    return Tensors{sum_to(in[0], {4, 1}), sum_to(in[0], {5})};
  }, {0}));
  for (bool is_max : {true, false}) {
    std::string name = is_max ? "max" : "min";
    ops.push_back(make(name + "_all", kNumeric, x345, [is_max](const Tensors& in) {
      return Tensors{is_max ? max(in[0]) : min(in[0])};
    }, {0}));
    ops.push_back(make(name + "_dim", kNumeric, x345, [is_max](const Tensors& in) {
      ValuesIndices a = is_max ? max(in[0], 1) : min(in[0], 1);
      ValuesIndices b = is_max ? max(in[0], 0, true) : min(in[0], 0, true);
      return Tensors{a.values, a.indices, b.values, b.indices};
    }, {0}));
    ops.push_back(make("arg" + name, kNumeric, x345, [is_max](const Tensors& in) {
      const Tensor& x = in[0];
      return is_max ? Tensors{argmax(x, 1), argmax(x, -1, true)}
                    : Tensors{argmin(x, 1), argmin(x, -1, true)};
    }));
  }
}

void add_linalg_softmax(std::vector<OpInfo>& ops) {
  ops.push_back(make(
      "matmul", kFloats,
      [](DType dt, Device dev, Generator& gen) {
        return Tensors{signed_sample({2, 1, 3, 4}, dt, dev, gen),
                       signed_sample({5, 4, 2}, dt, dev, gen), signed_sample({4}, dt, dev, gen)};
      },
      [](const Tensors& in) {
        const Tensor &a = in[0], &b = in[1], &v = in[2];
        // 2-D+ with broadcast batch dims, the three 1-D cases, transposed operands.
        return Tensors{matmul(a, b), matmul(a, v), matmul(v, b), matmul(v, v),
                       matmul(b.transpose(-1, -2), a.transpose(-1, -2))};
      },
      {0, 1, 2}));
  ops.push_back(make(
      "bmm", kFloats,
      [](DType dt, Device dev, Generator& gen) {
        return Tensors{signed_sample({3, 4, 5}, dt, dev, gen),
                       signed_sample({3, 5, 2}, dt, dev, gen),
                       signed_sample({3, 2, 5}, dt, dev, gen)};
      },
      [](const Tensors& in) {
        return Tensors{bmm(in[0], in[1]), bmm(in[0], in[2].transpose(1, 2))};
      },
      {0, 1, 2}));
  for (bool log : {false, true}) {
    ops.push_back(make(
        log ? "log_softmax" : "softmax", kFloats,
        [](DType dt, Device dev, Generator& gen) {
          return Tensors{signed_sample({3, 4, 5}, dt, dev, gen)};
        },
        [log](const Tensors& in) {
          auto f = log ? log_softmax : softmax;
          return Tensors{f(in[0], -1), f(in[0], 1)};
        },
        {0}));
  }
}

void add_creation(std::vector<OpInfo>& ops) {
  auto proto_sample = [](DType dt, Device dev, Generator&) { return Tensors{proto(dt, dev)}; };
  ops.push_back(make("full", kAll, proto_sample, [](const Tensors& in) {
    TensorOptions o = opts(in[0].dtype(), in[0].device());
    Tensor f = Tensor::full({3, 4}, 2.0, o);
    return Tensors{f, zeros_like(f), ones_like(f), full_like(f, 3.0), Tensor::scalar(1.0, o)};
  }));
  ops.push_back(make("arange", kNumeric, proto_sample, [](const Tensors& in) {
    TensorOptions o = opts(in[0].dtype(), in[0].device());
    Tensors r{arange(0, 10, 2, o), arange(5, o), arange(7, 1, -3, o)};
    if (is_floating(in[0].dtype())) r.push_back(arange(1.0, 2.0, 0.25, o));
    return r;
  }));
  // Random ops draw from their own fixed generator, so both devices see the
  // same counters; see Note [Counter-based RNG].
  ops.push_back(make("rand", kFloats, proto_sample, [](const Tensors& in) {
    TensorOptions o = opts(in[0].dtype(), in[0].device());
    Generator g(1234);
    Tensor a = rand({4, 5}, o, &g);
    Tensor b = uniform({7}, -3, 2, o, &g);
    Tensor c = Tensor::empty({5, 3}, o).t();  // in place into a strided view
    uniform_(c, 1, 2, &g);
    return Tensors{a, b, c.contiguous()};
  }));
  ops.push_back(make("randn", kFloats, proto_sample, [](const Tensors& in) {
    TensorOptions o = opts(in[0].dtype(), in[0].device());
    Generator g(1234);
    Tensor a = randn({4, 5}, o, &g);
    Tensor b = normal({7}, 1, 3, o, &g);
    Tensor c = Tensor::empty({3, 4}, o);
    normal_(c, -1, 0.5, &g);
    return Tensors{a, b, c};
  }));
}

void add_indexing(std::vector<OpInfo>& ops) {
  ops.push_back(make(
      "cat", kAll,
      [](DType dt, Device dev, Generator& gen) {
        return Tensors{signed_sample({2, 3}, dt, dev, gen), signed_sample({4, 3}, dt, dev, gen),
                       signed_sample({1, 3}, dt, dev, gen), signed_sample({2, 2}, dt, dev, gen)};
      },
      [](const Tensors& in) {
        return Tensors{cat({in[0], in[1], in[2]}, 0), cat({in[0], in[3]}, 1),
                       cat({in[3], in[0].t().t()}, -1)};
      },
      {0, 1, 2, 3}));
  ops.push_back(make(
      "stack", kAll,
      [](DType dt, Device dev, Generator& gen) {
        return Tensors{signed_sample({2, 3}, dt, dev, gen), signed_sample({2, 3}, dt, dev, gen),
                       signed_sample({2, 3}, dt, dev, gen)};
      },
      [](const Tensors& in) {
        return Tensors{stack({in[0], in[1], in[2]}, 0), stack({in[0], in[1], in[2]}, 2),
                       stack({in[0], in[1]}, -2)};
      },
      {0, 1, 2}));
  ops.push_back(make(
      "index_select", kAll,
      [](DType dt, Device dev, Generator& gen) {
        return Tensors{signed_sample({4, 5}, dt, dev, gen),
                       index_tensor({3, 0, 3}, {3}, DType::i64, dev),
                       index_tensor({4, 1}, {2}, DType::i32, dev)};
      },
      [](const Tensors& in) {
        return Tensors{index_select(in[0], 0, in[1]), index_select(in[0], 1, in[1]),
                       index_select(in[0], -1, in[2])};
      },
      {0}));
  ops.push_back(make(
      "gather", kAll,
      [](DType dt, Device dev, Generator& gen) {
        return Tensors{signed_sample({3, 4}, dt, dev, gen),
                       index_tensor({3, 0, 1, 1, 0, 2}, {3, 2}, DType::i64, dev),
                       index_tensor({2, 0, 1, 2, 0, 0, 1, 1}, {2, 4}, DType::i32, dev)};
      },
      [](const Tensors& in) {
        return Tensors{gather(in[0], 1, in[1]), gather(in[0], 0, in[2])};
      },
      {0}));
  ops.push_back(make(
      "scatter_add", kNumeric,
      [](DType dt, Device dev, Generator& gen) {
        return Tensors{signed_sample({3, 5}, dt, dev, gen),
                       index_tensor({0, 4, 4, 1, 2, 2, 2, 3, 0, 1, 0, 4}, {3, 4}, DType::i64, dev),
                       signed_sample({3, 4}, dt, dev, gen), signed_sample({4, 6}, dt, dev, gen)};
      },
      [](const Tensors& in) {
        return Tensors{scatter_add(in[0], 1, in[1], in[2]), scatter_add(in[0], -1, in[1], in[3])};
      },
      {0, 2, 3}));
  ops.push_back(make(
      "one_hot", {DType::i64, DType::i32},
      [](DType dt, Device dev, Generator&) {
        return Tensors{index_tensor({0, 2, 1, 3, 2, 0}, {2, 3}, dt, dev)};
      },
      [](const Tensors& in) { return Tensors{one_hot(in[0], 5), one_hot(in[0])}; }));
}

void add_copies(std::vector<OpInfo>& ops) {
  ops.push_back(make(
      "transpose_copy", kAll,
      [](DType dt, Device dev, Generator& gen) {
        return Tensors{signed_sample({3, 4, 5}, dt, dev, gen)};
      },
      [](const Tensors& in) {
        const Tensor& x = in[0];
        return Tensors{x.transpose(0, 2).contiguous(), x.permute({1, 2, 0}).contiguous(),
                       x.narrow(1, 1, 2).contiguous()};
      },
      {0}));
  // Conversions between every pair of dtypes. Not gradchecked: a round trip
  // through f32 or f16 is not differentiable to f64 precision.
  ops.push_back(make(
      "cast", kAll,
      [](DType dt, Device dev, Generator& gen) {
        return Tensors{signed_sample({3, 4}, dt, dev, gen)};
      },
      [](const Tensors& in) {
        Tensors r;
        for (DType to : kAllDTypes) {
          // Negative floats to u8 are undefined in C++; skip that pair.
          if (to == DType::u8 && in[0].dtype() != DType::u8 && in[0].dtype() != DType::bool_)
            continue;
          r.push_back(in[0].to(to));
        }
        return r;
      }));
}

std::vector<OpInfo> build_registry() {
  std::vector<OpInfo> ops;
  add_elementwise(ops);
  add_reductions(ops);
  add_linalg_softmax(ops);
  add_creation(ops);
  add_indexing(ops);
  add_copies(ops);
  return ops;
}

}  // namespace

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
