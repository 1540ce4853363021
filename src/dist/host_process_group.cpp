// See Note [Host collective sequence] in host_collectives.h.

#include "host_collectives.h"

#include "ddp/dist/host_process_group.h"

#include <cstring>
#include <memory>

#include "host_staging.h"

namespace ddp::dist::detail {

namespace {

// Reduces groups of same-dtype tensors in place, one wire buffer per dtype
// (no copy for a single tensor of a native wire dtype). root < 0: allreduce.
WorkPtr reduce_coalesced(HostTransport& t, const char* op, const Tensors& tensors, ReduceOp rop,
                         int root) {
  auto staged = stage_all(tensors, true);
  return t.submit(op, tensors, [&t, op, staged, rop, root] {
    const int rank = t.transport_rank();
    const bool result_here = root < 0 || root == rank;
    for (WireGroup& g : pack_by_dtype(staged)) {
      if (g.numel > 0) t.reduce(op, g.wire, g.data, g.numel, rop, root);
      if (!result_here) continue;  // non-root buffers are unspecified after reduce
      if (rop == ReduceOp::avg) divide(g.wire, g.data, g.numel, t.transport_size());
      unpack(g, staged);
    }
    if (result_here)
      for (const Staged& s : staged) unstage(s);
  });
}

}  // namespace

}  // namespace ddp::dist::detail

namespace ddp::dist {

using namespace detail;

WorkPtr HostProcessGroup::do_allreduce(Tensors& tensors, ReduceOp op) {
  return reduce_coalesced(transport(), "allreduce", tensors, op, -1);
}

WorkPtr HostProcessGroup::do_reduce(Tensors& tensors, int root, ReduceOp op) {
  return reduce_coalesced(transport(), "reduce", tensors, op, root);
}

// Note [Coalesced broadcast]
// Broadcasting many small tensors (BatchNorm buffers at every forward, a
// model's parameters at construction) one by one pays the transport's
// latency per tensor. Runs of small tensors (each at most kSmallTensorBytes)
// are packed into one flat buffer of at most kCoalescedBytes and sent in one
// call; a large tensor goes on its own, in place, since packing it would
// only add two copies. Every rank sees the same shapes, so all ranks cut the
// same packs.
constexpr size_t kSmallTensorBytes = size_t(64) << 10;
constexpr size_t kCoalescedBytes = size_t(4) << 20;

WorkPtr HostProcessGroup::do_broadcast(Tensors& tensors, int root) {
  HostTransport& t = transport();
  const bool is_root = t.transport_rank() == root;
  auto staged = stage_all(tensors, is_root);
  return t.submit("broadcast", tensors, [&t, staged, root, is_root] {
    std::vector<std::byte> pack;
    size_t first = 0;  // the first tensor of the pack being built
    auto flush = [&](size_t end) {
      if (first < end && !pack.empty()) {
        if (end - first == 1) {
          const Staged& s = staged[first];
          t.broadcast("broadcast", s.host.data_ptr(), s.host.nbytes(), root);
        } else {
          t.broadcast("broadcast", pack.data(), pack.size(), root);
          if (!is_root) {
            size_t at = 0;
            for (size_t k = first; k < end; ++k) {
              const size_t n = staged[k].host.nbytes();
              std::memcpy(staged[k].host.data_ptr(), pack.data() + at, n);
              at += n;
            }
          }
        }
      }
      pack.clear();
      first = end;
    };
    for (size_t k = 0; k < staged.size(); ++k) {
      const Tensor& h = staged[k].host;
      const size_t n = h.nbytes();
      if (n > kSmallTensorBytes) {
        flush(k);
        if (n > 0) t.broadcast("broadcast", h.data_ptr(), n, root);
        first = k + 1;
        continue;
      }
      if (pack.size() + n > kCoalescedBytes) flush(k);
      const size_t at = pack.size();
      pack.resize(at + n);
      if (is_root && n > 0) std::memcpy(pack.data() + at, h.data_ptr(), n);
    }
    flush(staged.size());
    if (!is_root)
      for (const Staged& s : staged) unstage(s);
  });
}

WorkPtr HostProcessGroup::do_allgather(Tensors& outputs, const Tensor& input) {
  HostTransport& t = transport();
  t.check_count("allgather", int64_t(input.nbytes()), input);
  Staged in = stage(input, true);
  auto outs = stage_all(outputs, false);
  return t.submit("allgather", outputs, [&t, in, outs] {
    const size_t n = in.host.nbytes();
    if (n == 0) return;
    // Straight into the outputs when they are one buffer (a chunked view).
    const bool direct = consecutive(outs);
    std::unique_ptr<std::byte[]> owned;
    std::byte* recv = direct ? bytes(outs[0].host) : nullptr;
    if (!direct) {
      owned = std::make_unique_for_overwrite<std::byte[]>(n * outs.size());
      recv = owned.get();
    }
    // The input already in its slot: in place (MPI forbids aliased buffers).
    const bool in_slot = bytes(in.host) == recv + size_t(t.transport_rank()) * n;
    t.allgather("allgather", in_slot ? nullptr : bytes(in.host), recv, n);
    for (size_t r = 0; r < outs.size(); ++r) {
      if (!direct) std::memcpy(bytes(outs[r].host), recv + r * n, n);
      unstage(outs[r]);
    }
  });
}

WorkPtr HostProcessGroup::do_reduce_scatter(const Tensor& output, Tensors& inputs, ReduceOp op) {
  HostTransport& t = transport();
  t.check_count("reduce_scatter", output.numel(), output);
  Staged out = stage(output, false);
  auto ins = stage_all(inputs, true);
  return t.submit("reduce_scatter", {output}, [&t, out, ins, op] {
    const int64_t n = out.host.numel();
    if (n == 0) return;
    const DType d = out.host.dtype(), wire = wire_dtype(d);
    const size_t esize = element_size(wire);
    const bool native = wire == d;
    std::unique_ptr<std::byte[]> send_owned, recv_owned;
    std::byte* send = nullptr;
    // Inputs back to back are the send buffer as they are, unless the output
    // lies inside them.
    std::byte* out_at = bytes(out.host);
    std::byte* in_at = bytes(ins[0].host);
    const bool aliased =
        out_at + n * esize > in_at && out_at < in_at + ins.size() * size_t(n) * esize;
    if (native && consecutive(ins) && !aliased) {
      send = in_at;
    } else {
      send_owned = std::make_unique_for_overwrite<std::byte[]>(size_t(n) * esize * ins.size());
      send = send_owned.get();
      for (size_t r = 0; r < ins.size(); ++r)
        to_wire(d, ins[r].host.data_ptr(), send + r * size_t(n) * esize, n);
    }
    std::byte* recv = out_at;
    if (!native) {
      recv_owned = std::make_unique_for_overwrite<std::byte[]>(size_t(n) * esize);
      recv = recv_owned.get();
    }
    t.reduce_scatter("reduce_scatter", wire, send, send_owned != nullptr, recv, n, op);
    if (op == ReduceOp::avg) divide(wire, recv, n, t.transport_size());
    if (!native) from_wire(d, recv, out.host.data_ptr(), n);
    unstage(out);
  });
}

WorkPtr HostProcessGroup::do_all_to_all(const Tensor& output, const Tensor& input) {
  HostTransport& t = transport();
  t.check_count("all_to_all", int64_t(input.nbytes()) / size(), input);
  Staged in = stage(input, true);
  // The same tensor in and out: in place (and one host copy when staged).
  const bool in_place = output.data_ptr() == input.data_ptr();
  Staged out = in_place ? in : stage(output, false);
  return t.submit("all_to_all", {output}, [&t, in, out, in_place] {
    const size_t chunk = in.host.nbytes() / size_t(t.transport_size());
    if (chunk == 0) return;
    t.all_to_all("all_to_all", in_place ? nullptr : bytes(in.host), bytes(out.host), chunk);
    unstage(out);
  });
}

WorkPtr HostProcessGroup::do_barrier() {
  HostTransport& t = transport();
  return t.submit("barrier", {}, [&t] { t.barrier(); });
}

}  // namespace ddp::dist
