#pragma once
// Rendezvous helpers built on a Store; init_process_group stands on them.

#include <chrono>
#include <string>

#include "ddp/dist/store.h"

namespace ddp::dist {

// Blocks until all world_size ranks have called store_barrier with the same
// name, or raises TimeoutError naming the ranks that did not arrive:
//   "ranks 2, 3 of 4 did not arrive at 'init' within 5.0 s"
// The same name may be used for successive barriers (they are numbered, see
// Note [Store barrier]); after a timeout the barrier under that name is
// spoiled, as the ranks that did arrive were counted.
void store_barrier(Store& store, const std::string& name, int rank, int world_size,
                   std::chrono::milliseconds timeout);

}  // namespace ddp::dist
