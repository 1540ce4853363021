#pragma once
// Opens a listening TCP socket: shared by the TCPStore server and the
// metrics server, which word their own errors. Internal: not installed.

#include <cstdint>
#include <string>

namespace ddp::detail {

struct TcpListener {
  int fd = -1;             // non-blocking, close-on-exec; -1 on failure
  uint16_t port = 0;       // the port bound (the kernel's pick for port 0)
  bool resolved = true;    // false: the address did not resolve
  int error = 0;           // on failure: the errno of the last address tried
  std::string error_text;  // on failure: why, for a message
};

// Listens on address:port (port 0: any free port) on the first of the
// address's resolutions that accepts. See Note [Exclusive metrics port].
TcpListener listen_tcp(const std::string& address, uint16_t port);

}  // namespace ddp::detail
