// The tensor layer's entries of the op registry: the elementwise ones
// generated from op_list.h (Note [One list per op family]), then
// reductions, linear algebra, softmax, creation, indexing and copies, each
// with the bad inputs it must refuse. See Note [Sample inputs] in
// op_registry.cpp.

#include <string>

#include "ddp/tensor/ops.h"
#include "tensor/op_registry.h"

namespace ddp {

namespace {

using namespace op_samples;

const std::vector<DType> kNumeric = {DType::f32, DType::f64, DType::f16, DType::bf16,
                                     DType::i32, DType::i64};
const std::vector<DType> kAll(std::begin(kAllDTypes), std::end(kAllDTypes));

Tensor signed_sample(const Shape& shape, DType dt, Device dev, Generator& gen) {
  return signed_values(shape, dt, dev, gen);
}
Tensor positive_sample(const Shape& shape, DType dt, Device dev, Generator& gen) {
  return positive_values(shape, dt, dev, gen);
}
Tensor index_tensor(const std::vector<int64_t>& values, const Shape& shape, DType dt, Device dev) {
  return fixed_values(values, shape, dt, dev);
}
Tensor f32(const Shape& shape, Device dev) { return Tensor::zeros(shape, opts(DType::f32, dev)); }

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

// In-place ops (Note [In-place ops and autograd]): what the optimizers and
// the DDP engine write with. Not differentiable (they are never recorded).
void add_inplace(std::vector<OpInfo>& ops) {
  OpInfo op = make(
      "inplace_arithmetic", kNumeric,
      [](DType dt, Device dev, Generator& gen) {
        return Tensors{signed_sample({3, 4}, dt, dev, gen), signed_sample({4}, dt, dev, gen),
                       positive_sample({3, 4}, dt, dev, gen)};
      },
      [](const Tensors& in) {
        const Tensor &x = in[0], &row = in[1], &pos = in[2];
        Tensor a = x.clone(), b = x.clone(), c = Tensor::empty({4, 3}, opts(x.dtype(), x.device()));
        a.add_(row, 2.0).mul_(pos).sub_(x);  // broadcasting from a row
        b.mul_(3.0);
        if (is_floating(x.dtype())) b.div_(pos);  // integer div_ would truncate
        Tensor strided = c.t();                   // writes through a transposed view
        strided.copy_(row);
        Tensor d = x.clone();
        d.narrow(1, 1, 2).fill_(-1.0);
        Tensor cast = Tensor::empty({3, 4}, opts(DType::f64, x.device()));
        cast.copy_(x);  // across dtypes
        return Tensors{a, b, c, d, cast};
      });
  op.bad_inputs = {
      bad_input<ShapeError>("a source that does not broadcast", "add_: cannot broadcast",
                            [](Device d) {
                              Tensor t = f32({3, 4}, d);
                              t.add_(f32({3}, d));
                            }),
      bad_input<ValueError>("a leaf that requires grad", "in-place operation on",
                            [](Device d) { f32({2}, d).set_requires_grad(true).mul_(2.0); }),
      bad_input<ValueError>("an expanded destination", "has overlapping memory",
                            [](Device d) { f32({1, 4}, d).expand({3, 4}).fill_(1.0); }),
      bad_input<DTypeError>("a bool destination", "arithmetic on bool tensor", [](Device d) {
        Tensor t = Tensor::zeros({2}, opts(DType::bool_, d));
        t.add_(t);
      })};
  ops.push_back(std::move(op));
}

OpInfo& entry(std::vector<OpInfo>& ops, const std::string& name) {
  for (OpInfo& op : ops)
    if (op.name == name) return op;
  DDP_THROW(ValueError, "op registry: no entry '{}' to add bad inputs to", name);
}

// The bad inputs of the tensor layer's entries, by family. Cross-device
// cases need two devices and are left to the backend tests.
void add_bad_inputs(std::vector<OpInfo>& ops) {
#define DDP_UNARY_BAD(name, Functor, float_only)                                                                 \
  entry(ops, #name).bad_inputs = {                                                              \
      bad_input<ValueError>("undefined input", #name ": argument 'x' is an undefined tensor",     \
                            [](Device) { ddp::name(Tensor()); })};                              \
  if (!(float_only))                                                                            \
    entry(ops, #name).bad_inputs.push_back(bad_input<DTypeError>(                               \
        "bool input", "bool tensors are not supported", [](Device d) {                          \
          ddp::name(Tensor::zeros({2}, opts(DType::bool_, d)));                                 \
        }));
  DDP_FOR_EACH_UNARY_OP(DDP_UNARY_BAD)
#undef DDP_UNARY_BAD
#define DDP_BINARY_BAD(name, ...)                                                              \
  entry(ops, #name).bad_inputs = {                                                           \
      bad_input<ShapeError>("shapes that do not broadcast", "shapes do not broadcast",         \
                            [](Device d) { ddp::name(f32({2, 3}, d), f32({4}, d)); }),         \
      bad_input<ValueError>("an undefined operand", #name ": argument 'b' is an undefined",    \
                            [](Device d) { ddp::name(f32({2}, d), Tensor()); })};              \
  /* div promotes bool to f32 (Note [True division]); the others refuse it */                 \
  if (std::string(#name) != "div")                                                            \
    entry(ops, #name).bad_inputs.push_back(bad_input<DTypeError>(                              \
        "bool operands", "arithmetic on bool tensors", [](Device d) {                          \
          Tensor b = Tensor::zeros({2}, opts(DType::bool_, d));                                 \
          ddp::name(b, b);                                                                      \
        }));
  DDP_FOR_EACH_BINARY_OP(DDP_BINARY_BAD)
#undef DDP_BINARY_BAD
#define DDP_COMPARE_BAD(name, ...)                                                         \
  entry(ops, #name).bad_inputs = {                                                       \
      bad_input<ShapeError>("shapes that do not broadcast", "shapes do not broadcast",     \
                            [](Device d) { ddp::name(f32({2, 3}, d), f32({2}, d)); })};
  DDP_FOR_EACH_COMPARE_OP(DDP_COMPARE_BAD)
#undef DDP_COMPARE_BAD

  entry(ops, "where").bad_inputs = {
      bad_input<DTypeError>("a float condition", "the condition must be bool",
                            [](Device d) { where(f32({2}, d), f32({2}, d), f32({2}, d)); })};
  entry(ops, "masked_fill").bad_inputs = {
      bad_input<DTypeError>("a float mask", "must be bool",
                            [](Device d) { masked_fill(f32({2}, d), f32({2}, d), 1.0); })};
  entry(ops, "pow").bad_inputs = {
      bad_input<DTypeError>("a bool base", "pow: bool tensors are not supported",
                            [](Device d) { pow(Tensor::ones({2}, opts(DType::bool_, d)), 2.0); }),
      bad_input<ValueError>("a negative exponent of an integer base", "pow", [](Device d) {
        pow(Tensor::ones({2}, opts(DType::i32, d)), -2.0);
      })};
  // wrap_dim's message: "<op>: dim <d> out of range for a <n>-dim tensor".
  auto reduce_bad = [](const std::string& op, std::function<void(const Tensor&)> f) {
    return bad_input<IndexError>("a dim out of range", op + ": dim",
                                 [f](Device d) { f(f32({2, 3}, d)); });
  };
  entry(ops, "sum").bad_inputs = {reduce_bad("sum", [](const Tensor& x) { sum(x, {2}); })};
  entry(ops, "mean").bad_inputs = {
      reduce_bad("mean", [](const Tensor& x) { mean(x, {-3}); }),
      bad_input<DTypeError>("an integer input", "mean", [](Device d) {
        mean(Tensor::ones({2}, opts(DType::i64, d)));
      })};
  entry(ops, "var").bad_inputs = {reduce_bad("var", [](const Tensor& x) { var(x, {5}); })};
  entry(ops, "sum_to").bad_inputs = {bad_input<ShapeError>(
      "a shape it does not broadcast to", "cannot sum", [](Device d) { sum_to(f32({2, 3}, d), {2}); })};
  entry(ops, "max_all").bad_inputs = {bad_input<IndexError>(
      "an empty input", "max: cannot reduce an empty tensor", [](Device d) { max(f32({0}, d)); })};
  entry(ops, "min_all").bad_inputs = {bad_input<IndexError>(
      "an empty input", "min: cannot reduce an empty tensor", [](Device d) { min(f32({2, 0}, d)); })};
  entry(ops, "max_dim").bad_inputs = {reduce_bad("max", [](const Tensor& x) { max(x, 2); })};
  entry(ops, "min_dim").bad_inputs = {reduce_bad("min", [](const Tensor& x) { min(x, -3); })};
  entry(ops, "argmax").bad_inputs = {reduce_bad("argmax", [](const Tensor& x) { argmax(x, 2); })};
  entry(ops, "argmin").bad_inputs = {reduce_bad("argmin", [](const Tensor& x) { argmin(x, 2); })};
  entry(ops, "matmul").bad_inputs = {
      bad_input<ShapeError>("inner dims that differ", "matmul",
                            [](Device d) { matmul(f32({2, 3}, d), f32({4, 2}, d)); }),
      bad_input<DTypeError>("integer operands", "matmul", [](Device d) {
        Tensor i = Tensor::ones({2, 2}, opts(DType::i64, d));
        matmul(i, i);
      })};
  entry(ops, "bmm").bad_inputs = {bad_input<ShapeError>(
      "2-D operands", "bmm", [](Device d) { bmm(f32({2, 3}, d), f32({3, 2}, d)); })};
  for (bool log : {false, true}) {
    auto f = log ? log_softmax : softmax;
    const char* name = log ? "log_softmax" : "softmax";
    entry(ops, name).bad_inputs = {
        bad_input<IndexError>("a dim out of range", std::string(name) + ": dim",
                              [f](Device d) { f(f32({2, 3}, d), 2); }),
        bad_input<DTypeError>("an integer input", name, [f](Device d) {
          f(Tensor::ones({2, 3}, opts(DType::i64, d)), 1);
        })};
  }
  entry(ops, "arange").bad_inputs = {
      bad_input<ValueError>("a zero step", "step must be nonzero",
                            [](Device d) { arange(0.0, 4.0, 0.0, opts(DType::f32, d)); }),
      bad_input<DTypeError>("bool", "bool is not a numeric dtype",
                            [](Device d) { arange(0.0, 4.0, 1.0, opts(DType::bool_, d)); })};
  entry(ops, "full").bad_inputs = {bad_input<ValueError>(
      "a negative size", "negative size in shape [2, -1]", [](Device d) { Tensor::full({2, -1}, 1.0, opts(DType::f32, d)); })};
  entry(ops, "rand").bad_inputs = {
      bad_input<DTypeError>("an integer dtype", "rand",
                            [](Device d) { rand({2}, opts(DType::i64, d)); }),
      bad_input<ValueError>("low > high", "uniform",
                            [](Device d) { uniform({2}, 1.0, 0.0, opts(DType::f32, d)); })};
  entry(ops, "randn").bad_inputs = {bad_input<ValueError>(
      "a negative stddev", "normal", [](Device d) { normal({2}, 0.0, -1.0, opts(DType::f32, d)); })};
  entry(ops, "cat").bad_inputs = {
      bad_input<ShapeError>("shapes that differ outside dim", "cat: shapes differ outside dim",
                            [](Device d) { cat({f32({2, 3}, d), f32({2, 4}, d)}, 0); }),
      bad_input<ValueError>("no tensors", "cat: expected at least one tensor",
                            [](Device) { cat({}, 0); })};
  entry(ops, "stack").bad_inputs = {bad_input<ShapeError>(
      "different shapes", "stack", [](Device d) { stack({f32({2, 3}, d), f32({3, 2}, d)}); })};
  entry(ops, "index_select").bad_inputs = {
      bad_input<IndexError>("an index out of range", "index_select",
                            [](Device d) {
                              index_select(f32({4, 5}, d), 0, index_tensor({4}, {1}, DType::i64, d));
                            }),
      bad_input<DTypeError>("a float index", "index_select",
                            [](Device d) { index_select(f32({4, 5}, d), 0, f32({1}, d)); })};
  entry(ops, "gather").bad_inputs = {
      bad_input<ShapeError>("an index of another rank", "gather",
                            [](Device d) {
                              gather(f32({3, 4}, d), 1, index_tensor({0}, {1}, DType::i64, d));
                            }),
      bad_input<IndexError>("an index out of range", "gather", [](Device d) {
        gather(f32({3, 4}, d), 1, index_tensor({0, 4}, {1, 2}, DType::i64, d));
      })};
  entry(ops, "scatter_add").bad_inputs = {bad_input<DTypeError>(
      "src of another dtype", "scatter_add", [](Device d) {
        scatter_add(f32({3, 4}, d), 1, index_tensor({0}, {1, 1}, DType::i64, d),
                    Tensor::ones({1, 1}, opts(DType::f64, d)));
      })};
  entry(ops, "one_hot").bad_inputs = {
      bad_input<IndexError>("a class out of range", "one_hot",
                            [](Device d) { one_hot(index_tensor({0, 5}, {2}, DType::i64, d), 5); }),
      bad_input<ValueError>("num_classes below -1", "one_hot: num_classes must be",
                            [](Device d) { one_hot(index_tensor({0}, {1}, DType::i64, d), -2); })};
  entry(ops, "transpose_copy").bad_inputs = {bad_input<IndexError>(
      "a dim out of range", "transpose", [](Device d) { f32({2, 3}, d).transpose(0, 2).contiguous(); })};
  entry(ops, "cast").bad_inputs = {bad_input<ValueError>(
      "an undefined tensor", "to: the tensor is undefined", [](Device) { Tensor().to(DType::f32); })};
}

}  // namespace

namespace detail {

void add_tensor_op_infos(std::vector<OpInfo>& ops) {
  add_elementwise(ops);
  add_reductions(ops);
  add_linalg_softmax(ops);
  add_creation(ops);
  add_indexing(ops);
  add_copies(ops);
  add_bad_inputs(ops);
  add_inplace(ops);
}

}  // namespace detail

}  // namespace ddp
