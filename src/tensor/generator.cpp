#include "ddp/tensor/generator.h"

namespace ddp {

// Note [Default generator]
// Like torch's default CPU generator, one per process, used when a random op is
// given none. It is internally locked; code that needs independent streams (a
// data loader, a second model) passes its own Generator.
Generator& default_generator() {
  static Generator gen(0x5eed);
  return gen;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace ddp
