// matmul (torch.matmul semantics: 1-D operands, broadcast batch dims) and bmm.
// Both end in one Backend::bmm call on [B, M, K] x [B, K, N] operands.

#include <algorithm>

#include "tensor/autocast_policy.h"
#include "ddp/autograd/node.h"
#include "ddp/tensor/backend.h"
#include "ddp/tensor/ops.h"
#include "ops/ops_util.h"

namespace ddp {

using namespace ops_detail;

namespace {

// Note [Batched operand layout]
// Backend::bmm takes each operand as [B, R, C] that is row-major (stride(-1)
// == 1) or column-major (stride(-2) == 1) with one batch stride (0 allowed).
// So a transposed matrix, a broadcast matrix (stride 0 over the batch) or a
// batch of contiguous matrices go to the kernel without a copy; only batch
// dims that cannot be merged into one stride, or last two dims that are
// neither layout, are copied. Strides of size-1 dims address nothing, so they
// are rewritten to canonical values (this keeps BLAS leading dims valid).
Tensor as_batched(const Tensor& t, const Shape& batch, int64_t nbatch) {
  int64_t nd = t.dim();
  int64_t R = t.size(-2), C = t.size(-1);
  int64_t sr = t.stride(-2), sc = t.stride(-1);
  bool row_major = (sc == 1 || C == 1) && (R == 1 || sr >= std::max<int64_t>(C, 1));
  bool col_major = (sr == 1 || R == 1) && (C == 1 || sc >= std::max<int64_t>(R, 1));

  // One stride for the whole batch: 0 when t is broadcast along every batch
  // dim that matters, else the innermost stride when t's own batch dims
  // merge (each stride = the next one's stride * size).
  bool all_broadcast = true, none_broadcast = true, merges = true;
  int64_t sb = 0, expected = 0;
  int64_t lead = int64_t(batch.size()) - (nd - 2);  // batch dims t lacks in front
  for (int64_t i = int64_t(batch.size()) - 1; i >= 0; --i) {
    if (batch[size_t(i)] == 1) continue;
    int64_t size = i < lead ? 1 : t.size(i - lead);
    if (size == 1) {
      none_broadcast = false;
      continue;
    }
    int64_t stride = t.stride(i - lead);
    if (all_broadcast) sb = stride;
    else if (stride != expected) merges = false;
    all_broadcast = false;
    expected = stride * size;
  }
  bool mergeable = all_broadcast || (none_broadcast && merges);
  if (all_broadcast) sb = 0;

  Tensor base = t;
  if (!mergeable || !(row_major || col_major)) {
    Shape full = batch;
    full.push_back(R);
    full.push_back(C);
    base = t.expand(full).contiguous();
    sb = R * C, sr = C, sc = 1;
    row_major = true;
  }
  if (row_major) {
    sc = 1;
    if (R == 1) sr = std::max<int64_t>(C, 1);
  } else {
    sr = 1;
    if (C == 1) sc = std::max<int64_t>(R, 1);
  }
  if (nbatch == 1) sb = 0;
  return Tensor::from_storage(base.storage(), {nbatch, R, C}, {sb, sr, sc}, base.offset(),
                              base.dtype());
}

void check_operands(const char* op, const Tensor& a, const Tensor& b) {
  check_defined(op, a, "a");
  check_defined(op, b, "b");
  check_same_device(op, a, b);
  DDP_CHECK_T(DTypeError, is_floating(a.dtype()) && a.dtype() == b.dtype(),
              "{}: expected two floating tensors of one dtype, got {} and {}", op, a.describe(),
              b.describe());
}

// out (batch + [M, N], contiguous) = a2 @ b2 with a2 = batch_a + [M, K],
// b2 = batch_b + [K, N], the batch dims broadcasting to `batch`.
void run_bmm(const Tensor& a2, const Tensor& b2, const Shape& batch, const Tensor& out) {
  int64_t nbatch = shape_numel(batch);
  int64_t M = a2.size(-2), K = a2.size(-1), N = b2.size(-1);
  if (out.numel() == 0) return;
  Backend& be = backend_for(out.device());
  if (K == 0) {
    be.fill(out, 0.0);  // an empty sum of products
    return;
  }
  be.bmm(as_batched(a2, batch, nbatch), as_batched(b2, batch, nbatch),
         out.view({nbatch, M, N}));
}

Shape batch_of(const Tensor& t) { return Shape(t.shape().begin(), t.shape().end() - 2); }

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  if (amp::detail::autocast_active())  // See Note [Autocast policy]
    return amp::detail::autocast_call(amp::detail::AutocastOp::matmul, {a, b},
                                      [](const Tensors& t) { return matmul(t[0], t[1]); });
  const char* name = "matmul";
  check_operands(name, a, b);
  DDP_CHECK_T(ShapeError, a.dim() >= 1 && b.dim() >= 1,
              "matmul: both operands need at least 1 dim, got {} and {}", a.describe(),
              b.describe());
  // 1-D operands become a row (a) or a column (b); those dims are dropped again.
  Tensor a2 = a.dim() == 1 ? a.detach().unsqueeze(0) : a.detach();
  Tensor b2 = b.dim() == 1 ? b.detach().unsqueeze(-1) : b.detach();
  int64_t M = a2.size(-2), K = a2.size(-1), N = b2.size(-1);
  DDP_CHECK_T(ShapeError, K == b2.size(-2),
              "matmul: inner dims differ: {} (K = {}) and {} (K = {})", a.describe(), K,
              b.describe(), b2.size(-2));
  bool ok = false;
  Shape batch = broadcast_shape(batch_of(a2), batch_of(b2), &ok);
  DDP_CHECK_T(ShapeError, ok, "matmul: batch dims do not broadcast: {} and {}", a.describe(),
              b.describe());
  Shape out_shape = batch;
  if (a.dim() > 1) out_shape.push_back(M);
  if (b.dim() > 1) out_shape.push_back(N);
  Tensor out = empty_out(name, out_shape, a.dtype(), a.device());
  run_bmm(a2, b2, batch, out);

  // Backward: grad_a = g @ b^T, grad_b = a^T @ g on the 2-D+ forms, summed
  // over the batch dims each operand was broadcast along.
  if (autograd::needs_grad({a, b})) {
    bool need_a = autograd::needs_grad({a}), need_b = autograd::needs_grad({b});
    Shape g_shape = batch, sa = a.shape(), sb = b.shape(), sa2 = a2.shape(), sb2 = b2.shape();
    g_shape.push_back(M);
    g_shape.push_back(N);
    // Each gradient needs only the other operand: save no more than that.
    Tensor a_saved = need_b ? a2 : Tensor(), b_saved = need_a ? b2 : Tensor();
    autograd::record(name, {a, b}, {out}, [=](const Tensors& grads) -> Tensors {
      Tensor g2 = grads[0].reshape(g_shape);
      Tensors r(2);
      if (need_a) r[0] = sum_to(matmul(g2, b_saved.transpose(-1, -2)), sa2).reshape(sa);
      if (need_b) r[1] = sum_to(matmul(a_saved.transpose(-1, -2), g2), sb2).reshape(sb);
      return r;
    });
  }
  return out;
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  if (amp::detail::autocast_active())  // See Note [Autocast policy]
    return amp::detail::autocast_call(amp::detail::AutocastOp::bmm, {a, b},
                                      [](const Tensors& t) { return bmm(t[0], t[1]); });
  const char* name = "bmm";
  check_operands(name, a, b);
  DDP_CHECK_T(ShapeError, a.dim() == 3 && b.dim() == 3,
              "bmm: expected two 3-D tensors [B, M, K] and [B, K, N], got {} and {}",
              a.describe(), b.describe());
  DDP_CHECK_T(ShapeError, a.size(0) == b.size(0) && a.size(2) == b.size(1),
              "bmm: shapes do not match: {} and {} (need [B, M, K] and [B, K, N])",
              a.describe(), b.describe());
  Tensor out = empty_out(name, {a.size(0), a.size(1), b.size(2)}, a.dtype(), a.device());
  Tensor ad = a.detach(), bd = b.detach();
  run_bmm(ad, bd, {a.size(0)}, out);

  if (autograd::needs_grad({a, b})) {
    bool need_a = autograd::needs_grad({a}), need_b = autograd::needs_grad({b});
    Tensor a_saved = need_b ? ad : Tensor(), b_saved = need_a ? bd : Tensor();
    autograd::record(name, {a, b}, {out}, [=](const Tensors& grads) -> Tensors {
      const Tensor& g = grads[0];
      Tensors r(2);
      if (need_a) r[0] = bmm(g, b_saved.transpose(1, 2));
      if (need_b) r[1] = bmm(a_saved.transpose(1, 2), g);
      return r;
    });
  }
  return out;
}

}  // namespace ddp
