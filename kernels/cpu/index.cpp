// gather and scatter_add along one dim on the CPU.
//
// Note [Indexing through a zero stride]
// Both kernels walk index's shape. The indexed tensor (in for gather, out for
// scatter_add) joins the strided loop with its stride along `dim` set to 0,
// so the loop yields the offset of "this position with coordinate 0 along
// dim"; the kernel adds index_value * stride(dim). No coordinate vectors are
// rebuilt per element. Sequential accumulation makes duplicate indices in
// scatter_add simply add up.

#include "cpu/convert.h"
#include "cpu/kernels.h"
#include "cpu/strided.h"
#include "ddp/core/dispatch.h"

namespace ddp::cpu_kernels {

namespace {

// A 0-dim tensor has no stride to index (torch allows dim 0 there: the
// index must then be 0).
Shape without_dim(const Tensor& t, int64_t dim) {
  Shape s = t.strides();
  if (!s.empty()) s[size_t(dim)] = 0;
  return s;
}
int64_t stride_of(const Tensor& t, int64_t dim) {
  return t.strides().empty() ? 0 : t.strides()[size_t(dim)];
}
int64_t wrap(int64_t dim, const Tensor& t) {
  return dim < 0 ? dim + int64_t(t.shape().size()) : dim;
}

template <class T, class I>
void gather_kernel(const Tensor& in, int64_t dim, const Tensor& index, const Tensor& out) {
  const Shape in_strides = without_dim(in, dim);
  const int64_t dim_stride = stride_of(in, dim);
  const I* ip = ptr<const I>(index);
  const T* src = ptr<const T>(in);
  T* dst = ptr<T>(out);
  for_each_run<3>(
      index.shape(), {&index.strides(), &out.strides(), &in_strides}, [&](const RunInfo<3>& r) {
        const I* ix = ip + r.offset[0];
        T* o = dst + r.offset[1];
        const T* s = src + r.offset[2];
        for (int64_t i = 0; i < r.length; ++i)
          o[i * r.stride[1]] = s[i * r.stride[2] + int64_t(ix[i * r.stride[0]]) * dim_stride];
      });
}

template <class T, class I>
void scatter_add_kernel(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  const Shape out_strides = without_dim(out, dim);
  const int64_t dim_stride = stride_of(out, dim);
  const I* ip = ptr<const I>(index);
  const T* sp = ptr<const T>(src);
  T* dst = ptr<T>(out);
  for_each_run<3>(index.shape(), {&index.strides(), &src.strides(), &out_strides},
                  [&](const RunInfo<3>& r) {
                    const I* ix = ip + r.offset[0];
                    const T* s = sp + r.offset[1];
                    T* o = dst + r.offset[2];
                    for (int64_t i = 0; i < r.length; ++i) {
                      T& target = o[i * r.stride[2] + int64_t(ix[i * r.stride[0]]) * dim_stride];
                      target = store<T>(load(target) + load(s[i * r.stride[1]]));
                    }
                  });
}

}  // namespace

void gather(const Tensor& in, int64_t dim, const Tensor& index, const Tensor& out) {
  dispatch_all(out.dtype(), "gather", [&]<class T>() {
    dispatch_index(index.dtype(), "gather",
                   [&]<class I>() { gather_kernel<T, I>(in, wrap(dim, in), index, out); });
  });
}

void scatter_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  dispatch_numeric(out.dtype(), "scatter_add", [&]<class T>() {
    dispatch_index(index.dtype(), "scatter_add",
                   [&]<class I>() { scatter_add_kernel<T, I>(out, wrap(dim, out), index, src); });
  });
}

}  // namespace ddp::cpu_kernels
