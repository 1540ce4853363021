#include "cli.h"

#include "ddp/core/error.h"

#include <cstdio>

namespace bench {

int guarded_main(const char* program, const std::function<int()>& body) {
  try {
    return body();
  } catch (const UsageExit& e) {
    std::fputs(e.what(), e.code == 0 ? stdout : stderr);
    return e.code;
  } catch (const ddp::Error& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: unexpected error: %s\n", program, e.what());
    return 1;
  }
}

}  // namespace bench
