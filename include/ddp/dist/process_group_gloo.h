#pragma once
// ProcessGroupGloo: the "gloo" backend over Gloo's TCP transport, for CPU
// tensors; CUDA tensors are staged through host memory (See Note [Host
// staging] in src/dist/host_staging.h). Only declared here; it exists in
// builds with DDP_HAVE_GLOO (ddp/config.h). No Gloo header is included.
//
// Use (every rank, same order; usually through init_process_group()):
//   auto store = std::make_shared<ddp::dist::TCPStore>(...);
//   auto pg = ddp::dist::ProcessGroupGloo::create(store, rank, world_size);
//   pg->allreduce({grad})->wait();
//
// Gloo exchanges its addresses through libddp's store (no Redis, no shared
// files). Collectives start on the group's worker in submission order (Note
// [One worker per group]); with GlooOptions::threads > 1 that many may run
// at once and complete out of order; send and recv are posted at once and their
// Works complete when waited (like torch's gloo backend), so is_completed()
// of a send/recv stays false until wait() returns. A failure breaks the
// group: the first failing collective names the lost ranks (Note [Naming the
// lost rank]) and every later call raises the same error.

#include <chrono>
#include <memory>
#include <string>

#include "ddp/dist/host_process_group.h"
#include "ddp/dist/store.h"

namespace ddp::dist {

struct GlooOptions {
  // Where this rank listens for its peers, see Note [Gloo address] in the
  // .cpp. iface (a network interface, like GLOO_SOCKET_IFNAME, which is read
  // when both are empty) wins over hostname (a name or address of this
  // machine); when both are empty, the address this machine uses to reach
  // master_addr is taken, or 127.0.0.1 without a master_addr.
  std::string iface;
  std::string hostname;
  std::string master_addr;
  // Keys of this group in the store. Empty: "gloo/<n>" where n counts the
  // gloo groups this rank created on this store, so every rank must create
  // its groups in the same order.
  std::string group_name;
  // Per-collective timeout and connection timeout; zero: the store's
  // default (300 s, DDP_STORE_TIMEOUT_S).
  std::chrono::milliseconds timeout{0};
  // The rank whose process hosts the store (0 under torchrun/ddprun), named
  // as lost when the store disappears after a failure; -1: none of them.
  int store_host_rank = -1;
  // How long survivors wait for each other's answer after a failure (Note
  // [Naming the lost rank]); capped at timeout.
  std::chrono::milliseconds roll_call_grace{5000};
  // How many collectives of the group may run at once (Note [Gloo
  // collectives in flight] in the .cpp); 0: DDP_GLOO_THREADS, else 1.
  // 1..64, else ValueError. A world of one always uses one.
  int threads = 0;
};

class ProcessGroupGloo : public HostProcessGroup {
 public:
  // Connects to every other rank (a full mesh) through the store. Raises
  // TimeoutError naming the ranks that never arrived, GlooError when the
  // address cannot be bound.
  static std::shared_ptr<ProcessGroupGloo> create(std::shared_ptr<Store> store, int rank,
                                                  int size, GlooOptions options = {});
  // Runs what was already submitted, then closes the connections.
  ~ProcessGroupGloo() override;

  std::string backend_name() const override { return "gloo"; }
  // Also the timeout of the collectives already queued but not yet started.
  void set_timeout(std::chrono::milliseconds t) override;

  struct Impl;  // public only so that the .cpp's helpers can name it

 protected:
  detail::HostTransport& transport() override;
  WorkPtr do_send(const Tensor& tensor, int dst, int tag) override;
  WorkPtr do_recv(const Tensor& tensor, int src, int tag) override;

 private:
  ProcessGroupGloo(int rank, int size, std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddp::dist
