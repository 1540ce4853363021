// See Note [Host staging] and Note [Half precision on the wire] in host_staging.h.

#include "host_staging.h"

#include <algorithm>
#include <cstring>

#include "ddp/tensor/memory_format.h"
#include "tensor/pinned_allocator.h"

namespace ddp::dist::detail {

Staged stage(const Tensor& t, bool copy_in) {
  if (!t.is_cuda()) return {t, t};
  // Page-locked, from the pinned cache (Note [Pinned staging buffers]): the
  // copies in and out run at full PCIe speed, and the buffer goes back to the
  // cache when the Work lets go of it.
  // The host copy keeps the tensor's own dense layout, so both copies move
  // one block and the wire carries it as it lies (Note [Dense tensors in
  // collectives]).
  const size_t nbytes = std::max<size_t>(t.nbytes(), 1);
  Shape strides = contiguous_strides(t.shape());
  if (!t.is_contiguous()) dense_layout_strides(t, &strides);
  Tensor h = Tensor::from_storage(pinned_allocate(nbytes), t.shape(), strides, 0, t.dtype());
  if (copy_in) h.copy_(t);
  return {t, h};
}

std::vector<Staged> stage_all(const Tensors& ts, bool copy_in) {
  std::vector<Staged> out;
  out.reserve(ts.size());
  for (const Tensor& t : ts) out.push_back(stage(t, copy_in));
  return out;
}

void unstage(const Staged& s) {
  if (!s.user.is_cuda()) return;
  Tensor user = s.user;  // a handle: copy_ writes the shared data
  user.copy_(s.host);
}

bool consecutive(const std::vector<Staged>& ts) {
  for (size_t i = 1; i < ts.size(); ++i)
    if (bytes(ts[i].host) != bytes(ts[0].host) + i * ts[0].host.nbytes()) return false;
  return true;
}

DType wire_dtype(DType d) { return d == DType::f16 || d == DType::bf16 ? DType::f32 : d; }

template <class From, class To>
static void convert(const void* src, void* dst, int64_t n) {
  auto* s = static_cast<const From*>(src);
  auto* o = static_cast<To*>(dst);
  for (int64_t i = 0; i < n; ++i) o[i] = To(float(s[i]));
}

void to_wire(DType d, const void* src, void* dst, int64_t n) {
  if (d == DType::f16)
    convert<Half, float>(src, dst, n);
  else if (d == DType::bf16)
    convert<BFloat16, float>(src, dst, n);
  else
    std::memcpy(dst, src, size_t(n) * element_size(d));
}

void from_wire(DType d, const void* src, void* dst, int64_t n) {
  if (d == DType::f16)
    convert<float, Half>(src, dst, n);
  else if (d == DType::bf16)
    convert<float, BFloat16>(src, dst, n);
  else
    std::memcpy(dst, src, size_t(n) * element_size(d));
}

template <class T>
static void divide_as(void* buf, int64_t n, int size) {
  auto* p = static_cast<T*>(buf);
  for (int64_t i = 0; i < n; ++i) p[i] /= T(size);
}

void divide(DType wire, void* buf, int64_t n, int size) {
  if (wire == DType::f32)
    divide_as<float>(buf, n, size);
  else if (wire == DType::f64)
    divide_as<double>(buf, n, size);
}

std::vector<WireGroup> pack_by_dtype(const std::vector<Staged>& ts) {
  std::vector<WireGroup> groups;
  for (size_t i = 0; i < ts.size(); ++i) {
    DType d = ts[i].host.dtype();
    WireGroup* g = nullptr;
    for (WireGroup& x : groups)
      if (x.dtype == d) g = &x;
    if (!g) {
      g = &groups.emplace_back();
      g->dtype = d;
      g->wire = wire_dtype(d);
    }
    g->members.push_back(i);
    g->numel += ts[i].host.numel();
  }
  for (WireGroup& g : groups) {
    if (g.numel == 0) continue;
    if (g.members.size() == 1 && g.wire == g.dtype) {
      g.data = ts[g.members[0]].host.data_ptr();  // reduce the tensor itself
      continue;
    }
    const size_t esize = element_size(g.wire);
    g.owned = std::make_unique_for_overwrite<std::byte[]>(size_t(g.numel) * esize);
    int64_t off = 0;
    for (size_t i : g.members) {
      const Tensor& h = ts[i].host;
      to_wire(g.dtype, h.data_ptr(), g.owned.get() + off * esize, h.numel());
      off += h.numel();
    }
    g.data = g.owned.get();
  }
  return groups;
}

void unpack(const WireGroup& g, const std::vector<Staged>& ts) {
  if (!g.owned) return;
  const size_t esize = element_size(g.wire);
  int64_t off = 0;
  for (size_t i : g.members) {
    const Tensor& h = ts[i].host;
    from_wire(g.dtype, g.owned.get() + off * esize, h.data_ptr(), h.numel());
    off += h.numel();
  }
}

}  // namespace ddp::dist::detail
